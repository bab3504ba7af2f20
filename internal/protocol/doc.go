// Package protocol holds what the cache protocol codecs (subpackages resp and memcache) share:
// how the sidecar proxy must handle a command (Handling), the metrics class a command belongs to
// (Class), and allocation-free helpers for reading framed bytes from a *bufio.Reader and parsing
// decimal numbers out of byte slices.
//
// The codecs never touch the network themselves: they read from a *bufio.Reader and append to
// byte slices, so the proxy owns connections, deadlines and buffering.
package protocol
