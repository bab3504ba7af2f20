package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// redisClient speaks RESP2 to a cacheqos proxy, one command at a time, as a tenant's
// application would.
type redisClient struct {
	t      *testing.T
	conn   net.Conn
	reader *resp.ReplyReader
}

// dialRedis connects to addr, retrying while a new Service's rules reach iptables.
func dialRedis(t *testing.T, addr string) *redisClient {
	t.Helper()
	return dialRedisWith(t, addr, func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 2*time.Second) })
}

// dialRedisTLS connects to addr over TLS, trusting only the CAs of caPEM and expecting a
// certificate for serverName.
func dialRedisTLS(t *testing.T, addr, serverName string, caPEM []byte) *redisClient {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the CA bundle holds no certificate")
	}
	config := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	return dialRedisWith(t, addr, func() (net.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, config)
	})
}

func dialRedisWith(t *testing.T, addr string, dial func() (net.Conn, error)) *redisClient {
	t.Helper()
	var conn net.Conn
	waitFor(t, serviceTimeout, "a connection to "+addr, func() (bool, error) {
		var err error
		conn, err = dial()
		return err == nil, nil
	})
	t.Cleanup(func() { conn.Close() })
	return &redisClient{t: t, conn: conn, reader: resp.NewReplyReader(bufio.NewReader(conn), resp.ReplyLimits{})}
}

// do sends one command and returns its decoded reply; transport errors fail the test.
func (c *redisClient) do(args ...string) resp.Value {
	c.t.Helper()
	if err := c.conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.conn.Write(resp.AppendCommandStrings(nil, args...)); err != nil {
		c.t.Fatalf("%v: %v", args, err)
	}
	reply, err := c.reader.ReadReply()
	if err != nil {
		c.t.Fatalf("%v: reading the reply: %v", args, err)
	}
	value, err := reply.Decode()
	if err != nil {
		c.t.Fatalf("%v: decoding the reply: %v", args, err)
	}
	return value
}

// expect sends a command and fails the test unless the reply's text is want (for errors, the
// reply must start with want).
func (c *redisClient) expect(want string, args ...string) {
	c.t.Helper()
	v := c.do(args...)
	got := string(v.Str)
	if v.Type == resp.TypeInteger {
		got = string(v.Raw[1 : len(v.Raw)-2])
	}
	if v.IsError() {
		if len(got) < len(want) || got[:len(want)] != want {
			c.t.Errorf("%v: error %q, want %q", args, got, want)
		}
		return
	}
	if got != want {
		c.t.Errorf("%v: %q, want %q", args, got, want)
	}
}

// login dials addr and authenticates as user.
func login(t *testing.T, addr, user, password string) *redisClient {
	t.Helper()
	c := dialRedis(t, addr)
	c.expect("OK", "AUTH", user, password)
	return c
}
