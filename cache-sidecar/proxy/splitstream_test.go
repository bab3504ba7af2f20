package proxy

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// TestSplitStreamsNeverDeadlock has clients of one tenant, on node A of a two-node cluster of
// real engines with one link per engine and peer, pipeline random mixes of split reads of large
// values (whose parts are streamed, the writer holding one part's link while it copies
// another's), reads of one large value on either node (streamed), and small reads, all at
// once. Every reply comes back whole and in order within the deadline: no writer ever waits
// on a link that waits for it (splitstream.go).
func TestSplitStreamsNeverDeadlock(t *testing.T) {
	const clients, requests, valueLen = 6, 40, 100_000
	for _, proto := range []Protocol{Redis, Memcached} {
		t.Run(string(proto), func(t *testing.T) {
			cl := startClusterWith(t, Options{Protocol: proto, EngineLinks: 1, PeerLinks: 1}, 1, 1)
			keys := make([]string, 12)
			for i := range keys {
				keys[i] = fmt.Sprintf("big%d", i)
			}
			kp := placeKeys(t, cl, keys)
			if kp.counts[0] < 2 || kp.counts[1] < 2 {
				t.Fatalf("keys per node %v: want both nodes to hold some", kp.counts)
			}
			value := func(k string) string { return k + strings.Repeat("v", valueLen-len(k)) }
			if proto == Redis {
				c := loginRESP(t, cl.a, cl.acct)
				for _, k := range keys {
					c.do("SET", k, value(k))
				}
				c.do("SET", "small", "s")
			} else {
				c := loginMC(t, cl.a, cl.acct)
				for _, k := range keys {
					c.set(k, value(k))
				}
				c.set("small", "s")
			}
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			var conns []net.Conn
			for i := range clients {
				var nc net.Conn
				var br *bufio.Reader
				if proto == Redis {
					c := loginRESP(t, cl.a, cl.acct)
					nc, br = c.nc, c.br
				} else {
					c := loginMC(t, cl.a, cl.acct)
					nc, br = c.nc, c.br
				}
				conns = append(conns, nc)
				rng := rand.New(rand.NewPCG(uint64(i), 18))
				var batch []byte
				var wants [][]string // per request, the keys read (missing ones included)
				for range requests {
					var read []string
					switch rng.IntN(3) {
					case 0: // a split read over both nodes
						for _, k := range keys {
							if rng.IntN(2) == 0 {
								read = append(read, k)
							}
						}
						read = append(read, kp.onA, kp.onB, "missing")
						rng.Shuffle(len(read), func(a, b int) { read[a], read[b] = read[b], read[a] })
					case 1:
						read = []string{keys[rng.IntN(len(keys))]}
					default:
						read = []string{"small"}
					}
					wants = append(wants, read)
					if proto == Redis {
						batch = resp.AppendCommandStrings(batch, append([]string{"MGET"}, read...)...)
					} else {
						batch = append(batch, "get "+strings.Join(read, " ")+"\r\n"...)
					}
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					go func() { _, _ = nc.Write(batch) }() // a failed write shows as a missing reply
					for n, read := range wants {
						if err := readReads(proto, br, read, value); err != nil {
							errs <- fmt.Errorf("client %d, request %d (%d keys): %w", i, n, len(read), err)
							return
						}
					}
				}()
			}
			done := make(chan struct{})
			go func() {
				wg.Wait()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				for _, nc := range conns {
					nc.Close()
				}
				<-done
				t.Fatal("the clients' replies did not all come within 60s: the proxy is stuck")
			}
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// readReads reads the reply to an MGET (or memcached get) of keys, each holding value(key) but
// "small" ("s") and "missing" (no value), and checks it.
func readReads(proto Protocol, br *bufio.Reader, keys []string, value func(string) string) error {
	line := func() (string, error) {
		l, err := br.ReadString('\n')
		return strings.TrimSuffix(l, "\r\n"), err
	}
	expect := func(want string) error {
		got, err := line()
		if err != nil {
			return fmt.Errorf("line %.60q, want %q: %w", got, want, err)
		}
		if got != want {
			return fmt.Errorf("line %.60q, want %q", got, want)
		}
		return nil
	}
	if proto == Redis {
		if err := expect(fmt.Sprintf("*%d", len(keys))); err != nil {
			return err
		}
	}
	for _, k := range keys {
		want := ""
		switch k {
		case "missing":
			if proto == Redis {
				if err := expect("$-1"); err != nil {
					return err
				}
			}
			continue
		case "small":
			want = "s"
		default:
			want = value(k)
		}
		header := fmt.Sprintf("$%d", len(want))
		if proto == Memcached {
			header = fmt.Sprintf("VALUE %s 0 %d", k, len(want))
		}
		if err := expect(header); err != nil {
			return err
		}
		data := make([]byte, len(want)+2)
		if _, err := io.ReadFull(br, data); err != nil {
			return err
		}
		if string(data[:len(want)]) != want {
			return fmt.Errorf("value of %s is not its own", k)
		}
	}
	if proto == Memcached {
		return expect("END")
	}
	return nil
}

// FuzzBufferedResponseLen checks, against the ordinary memcached response reader, the scan that
// tells a split retrieval's part whole in a link's read buffer (read whole) from one to
// stream: for every response the reader reads, a length it finds is the whole response's, and
// no proper prefix passes for a whole one.
func FuzzBufferedResponseLen(f *testing.F) {
	for _, seed := range []string{"VALUE a 0 1\r\nx\r\nVALUE b 5 3 9\r\nxyz\r\nEND\r\n", "END\r\n",
		"VALUE a 0 2\r\nx\r\nEND\r\n", "SERVER_ERROR out of memory\r\n", "VALUE a 0 1\r\nx\r\nEN"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, input []byte) { checkBufferedScan(t, Memcached, bufferedResponseLen, input) })
}
