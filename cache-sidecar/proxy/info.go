package proxy

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"github.com/cacheqos/cacheqos/internal/protocol/resp"
)

// infoSection is an INFO section a tenant sees and the fields of it kept (nil: all of them).
type infoSection struct {
	name   string
	fields []string
}

// tenantInfo lists what INFO shows a tenant: its data's memory, keys, hit and miss counts and
// connections, and which redis serves it. The other sections and fields (executable and config
// file paths, process and run ids, ports, OS, persistence, replication, CPU, per-command
// stats...) describe the engine and the node, which are the operator's.
var tenantInfo = []infoSection{
	{"server", []string{"redis_version", "redis_mode", "uptime_in_seconds", "uptime_in_days"}},
	{"clients", nil},
	{"memory", nil},
	{"stats", nil},
	{"keyspace", nil},
}

var specInfo = resp.Lookup([]byte("info"))

// infoNote describes the filter on the commands page.
func infoNote() string {
	var parts []string
	for _, s := range tenantInfo {
		if s.fields == nil {
			parts = append(parts, s.name)
		} else {
			parts = append(parts, s.name+" ("+strings.Join(s.fields, ", ")+")")
		}
	}
	return "sections " + strings.Join(parts, ", ") + " only; the rest describes the engine and the node"
}

// filterInfo keeps what tenantInfo lists of an engine's INFO text.
func filterInfo(text []byte) []byte {
	var out []byte
	var keep *infoSection
	for line := range bytes.SplitSeq(text, []byte("\r\n")) {
		if header, ok := bytes.CutPrefix(line, []byte("# ")); ok {
			keep = nil
			for i := range tenantInfo {
				if strings.EqualFold(tenantInfo[i].name, string(header)) {
					keep = &tenantInfo[i]
				}
			}
			if keep != nil {
				if len(out) > 0 {
					out = append(out, "\r\n"...)
				}
				out = append(append(out, line...), "\r\n"...)
			}
			continue
		}
		if keep == nil || len(line) == 0 {
			continue
		}
		name, _, _ := bytes.Cut(line, []byte(":"))
		if keep.fields == nil || slices.Contains(keep.fields, string(name)) {
			out = append(append(out, line...), "\r\n"...)
		}
	}
	return out
}

// deliverInfo writes an INFO reply filtered for the tenant, as the bulk or verbatim string the
// engine sent.
func (h *redisHandler) deliverInfo(p *pending) {
	c := h.c
	v, ok := h.decodeReply(p, "INFO", func(v resp.Value) bool {
		return (v.Type == resp.TypeBulkString || v.Type == resp.TypeVerbatim) && !v.Null
	})
	if !ok {
		return
	}
	text := filterInfo(v.Str)
	if v.Type == resp.TypeBulkString {
		c.write(resp.AppendBulk(nil, text))
		return
	}
	out := strconv.AppendInt(append([]byte(nil), '='), int64(len(v.Format)+1+len(text)), 10)
	out = append(append(append(append(out, "\r\n"...), v.Format...), ':'), text...)
	c.write(append(out, "\r\n"...))
}
