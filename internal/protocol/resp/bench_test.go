package resp

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// pipelinedGetSet builds n commands alternating GET and SET, as a busy client pipelines them.
func pipelinedGetSet(n int) []byte {
	var buf []byte
	value := strings.Repeat("v", 64)
	for i := range n {
		key := "user:session:" + strings.Repeat("0", 3) + string(rune('a'+i%26))
		if i%2 == 0 {
			buf = AppendCommandStrings(buf, "GET", key)
		} else {
			buf = AppendCommandStrings(buf, "SET", key, value)
		}
	}
	return buf
}

// BenchmarkReadCommandPipeline measures the proxy's per-command hot path: parse, classify, find
// the keys. It reports ns and allocations per command; steady state allocates nothing.
func BenchmarkReadCommandPipeline(b *testing.B) {
	const batch = 100
	data := pipelinedGetSet(batch)
	src := bytes.NewReader(data)
	br := bufio.NewReaderSize(src, 16<<10)
	r := NewCommandReader(br, Limits{})
	keys := make([]int, 0, 4)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		src.Reset(data)
		br.Reset(src)
		r.Reset(br)
		for range batch {
			cmd, err := r.ReadCommand()
			if err != nil {
				b.Fatal(err)
			}
			spec, err := Classify(cmd.Args)
			if err != nil {
				b.Fatal(err)
			}
			if keys, err = spec.KeyIndexes(cmd.Args, keys[:0]); err != nil || len(keys) != 1 {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/command")
}

// BenchmarkReadReplyPipeline measures framing the engine's replies to such a batch.
func BenchmarkReadReplyPipeline(b *testing.B) {
	const batch = 100
	var data []byte
	for i := range batch {
		if i%2 == 0 {
			data = AppendBulkString(data, strings.Repeat("v", 64))
		} else {
			data = AppendSimpleString(data, "OK")
		}
	}
	src := bytes.NewReader(data)
	br := bufio.NewReaderSize(src, 16<<10)
	r := NewReplyReader(br, ReplyLimits{})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		src.Reset(data)
		br.Reset(src)
		r.Reset(br)
		for range batch {
			if _, err := r.ReadReply(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/reply")
}
