package memcache

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkReadRequestPipeline measures parsing a pipelined batch alternating get and set, the
// proxy's per-request hot path. It reports ns and allocations per request.
func BenchmarkReadRequestPipeline(b *testing.B) {
	const batch = 100
	value := []byte(strings.Repeat("v", 64))
	var data []byte
	for i := range batch {
		key := []byte("user:session:" + strconv.Itoa(i))
		if i%2 == 0 {
			data = AppendRetrieval(data, CmdGet, 0, [][]byte{key})
		} else {
			data = AppendStorage(data, CmdSet, key, 0, 300, 0, value, false)
		}
	}
	src := bytes.NewReader(data)
	br := bufio.NewReaderSize(src, 16<<10)
	r := NewRequestReader(br, RequestLimits{})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		src.Reset(data)
		br.Reset(src)
		r.Reset(br)
		for range batch {
			req, err := r.ReadRequest()
			if err != nil || len(req.Keys) != 1 {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/request")
}

// BenchmarkReadResponsePipeline measures framing the engine's responses to such a batch.
func BenchmarkReadResponsePipeline(b *testing.B) {
	const batch = 100
	value := []byte(strings.Repeat("v", 64))
	var data []byte
	for i := range batch {
		if i%2 == 0 {
			data = AppendEnd(AppendValue(data, []byte("user:session:"+strconv.Itoa(i)), 0, value))
		} else {
			data = AppendStatusLine(data, "STORED")
		}
	}
	src := bytes.NewReader(data)
	br := bufio.NewReaderSize(src, 16<<10)
	r := NewResponseReader(br, ResponseLimits{})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		src.Reset(data)
		br.Reset(src)
		r.Reset(br)
		for i := range batch {
			exp := Expect{Command: CmdSet}
			if i%2 == 0 {
				exp.Command = CmdGet
			}
			if _, err := r.ReadResponse(exp); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/response")
}
