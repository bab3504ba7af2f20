package engine

import (
	"bufio"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestReadRESP(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     respValue
		wantErr  error
		redisErr string
	}{
		{name: "simple", in: "+OK\r\n", want: respValue{kind: '+', str: "OK"}},
		{name: "integer", in: ":-42\r\n", want: respValue{kind: ':', num: -42}},
		{name: "bulk", in: "$5\r\nhe\r\no\r\n", want: respValue{kind: '$', str: "he\r\no"}},
		{name: "empty bulk", in: "$0\r\n\r\n", want: respValue{kind: '$', str: ""}},
		{name: "null bulk", in: "$-1\r\n", want: respValue{kind: '$', null: true}},
		{name: "null array", in: "*-1\r\n", want: respValue{kind: '*', null: true}},
		{name: "config get pair", in: "*2\r\n$9\r\nmaxmemory\r\n$3\r\n100\r\n",
			want: respValue{kind: '*', array: []respValue{{kind: '$', str: "maxmemory"}, {kind: '$', str: "100"}}}},
		{name: "error reply", in: "-ERR unknown command\r\n", redisErr: "ERR unknown command"},
		{name: "error inside array", in: "*2\r\n-ERR no\r\n:1\r\n", redisErr: "ERR no"},
		{name: "bare LF lines", in: "+OK\n", want: respValue{kind: '+', str: "OK"}},
		{name: "unknown type", in: "!3\r\n", wantErr: ErrProtocol},
		{name: "empty line", in: "\r\n", wantErr: ErrProtocol},
		{name: "bad integer", in: ":x\r\n", wantErr: ErrProtocol},
		{name: "negative length", in: "$-2\r\n", wantErr: ErrProtocol},
		{name: "huge bulk", in: "$999999999999\r\n", wantErr: ErrProtocol},
		{name: "bulk without CRLF", in: "$2\r\nabcd", wantErr: ErrProtocol},
		{name: "too deep", in: strings.Repeat("*1\r\n", maxReplyDepth+2) + ":1\r\n", wantErr: ErrProtocol},
		{name: "truncated line", in: "+OK", wantErr: ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readRESP(bufio.NewReader(strings.NewReader(tt.in)))
			var re *redisError
			switch {
			case tt.redisErr != "":
				if !errors.As(err, &re) || re.msg != tt.redisErr {
					t.Fatalf("err = %v, want redis error %q", err, tt.redisErr)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
			case err != nil:
				t.Fatalf("unexpected error %v", err)
			case !reflect.DeepEqual(got, tt.want):
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAppendRESPCommandRoundTrips(t *testing.T) {
	cmd := appendRESPCommand(nil, "CONFIG", "SET", "save", "")
	if want := "*4\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n$4\r\nsave\r\n$0\r\n\r\n"; string(cmd) != want {
		t.Fatalf("got %q, want %q", cmd, want)
	}
	v, err := readRESP(bufio.NewReader(strings.NewReader(string(cmd))))
	if err != nil || len(v.array) != 4 || v.array[2].str != "save" || v.array[3].str != "" {
		t.Fatalf("decoding our own command: %+v, %v", v, err)
	}
}

func TestParseRedisInfoAndKeyspace(t *testing.T) {
	info := parseRedisInfo("# Memory\r\nused_memory:1000\r\nmaxmemory:2000\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=0,avg_ttl=0\r\ndb5:keys=4,expires=1,avg_ttl=9\r\n")
	if info["used_memory"] != "1000" || info["maxmemory"] != "2000" {
		t.Fatalf("fields: %v", info)
	}
	keys, err := keyspaceKeys(info)
	if err != nil || keys != 7 {
		t.Fatalf("keyspaceKeys = %d, %v; want 7", keys, err)
	}
	for _, bad := range []string{"db0:keys=x", "db0:expires=1", "db1:keys=-3"} {
		if _, err := keyspaceKeys(parseRedisInfo(bad)); !errors.Is(err, ErrProtocol) {
			t.Errorf("keyspaceKeys(%q) = %v, want a protocol error", bad, err)
		}
	}
}

func TestParseMetadumpLine(t *testing.T) {
	tests := []struct {
		line    string
		want    metadumpItem
		wantErr bool
	}{
		{line: "key=k2%3A64070 exp=-1 la=1795317559 cas=159669 fetch=no cls=12 size=967",
			want: metadumpItem{key: []byte("k2:64070"), lastAccess: 1795317559, class: 12, size: 967}},
		{line: "key=a%20b%0D%0A%FF exp=1795317600 la=5 cas=1 fetch=yes cls=1 size=60 flags=0",
			want: metadumpItem{key: []byte("a b\r\n\xff"), lastAccess: 5, fetched: true, class: 1, size: 60}},
		{line: "key=abc exp=-1 la=5 cas=1 fetch=maybe cls=1 size=60", wantErr: true},
		{line: "key=abc exp=-1 la=-5 cas=1 fetch=no cls=1 size=60", wantErr: true},
		{line: "key=ab%2 exp=-1 la=5 cas=1 fetch=no cls=1 size=60", wantErr: true},
		{line: "key=ab%zz exp=-1 la=5 cas=1 fetch=no cls=1 size=60", wantErr: true},
		{line: "key= la=5 fetch=no cls=1 size=60", wantErr: true},
		{line: "key=abc la=5 fetch=no size=60", wantErr: true},
		{line: "key=abc la=5 fetch=no cls=1 size=60 junk", wantErr: true},
		{line: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseMetadumpLine([]byte(tt.line))
		if tt.wantErr {
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("parseMetadumpLine(%q) = %v, want a protocol error", tt.line, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseMetadumpLine(%q) = %+v, %v; want %+v", tt.line, got, err, tt.want)
		}
	}
}

func TestMetaDeleteLine(t *testing.T) {
	tests := []struct {
		key    string
		want   string
		wantOK bool
	}{
		{"user:1", "md user:1\r\n", true},
		{"a b", "md YSBi b\r\n", true},
		{"\x00\xff", "md AP8= b\r\n", true},
		{strings.Repeat("k", 250), "md " + strings.Repeat("k", 250) + "\r\n", true},
		{strings.Repeat(" ", 200), "", false}, // base64 would exceed memcached's 250-byte key token
	}
	for _, tt := range tests {
		got, ok := metaDeleteLine([]byte(tt.key))
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("metaDeleteLine(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestParseStatLineAndReplyErrors(t *testing.T) {
	name, value, err := parseStatLine([]byte("STAT version 1.6.18"))
	if err != nil || name != "version" || value != "1.6.18" {
		t.Fatalf("parseStatLine = %q %q %v", name, value, err)
	}
	if _, value, _ := parseStatLine([]byte("STAT rusage_user 0.1 0.2")); value != "0.1 0.2" {
		t.Errorf("value with spaces = %q", value)
	}
	for _, bad := range []string{"STAT x", "STAT  1", "STATS x y", "VALUE k 0 1"} {
		if _, _, err := parseStatLine([]byte(bad)); !errors.Is(err, ErrProtocol) {
			t.Errorf("parseStatLine(%q) = %v, want a protocol error", bad, err)
		}
	}
	for line, isErr := range map[string]bool{
		"ERROR": true, "ERROR metadump not allowed": true, "CLIENT_ERROR bad": true,
		"SERVER_ERROR out of memory": true, "ERRORS": false, "OK": false, "END": false,
	} {
		if got := replyError([]byte(line)) != nil; got != isErr {
			t.Errorf("replyError(%q) != nil is %v, want %v", line, got, isErr)
		}
	}
}

func TestParseSlabStats(t *testing.T) {
	fields := map[string]string{
		"1:chunk_size": "96", "1:chunks_per_page": "10922", "1:total_pages": "1", "1:free_chunks": "10900",
		"12:chunk_size": "1184", "12:chunks_per_page": "885", "12:total_pages": "64", "12:free_chunks": "3",
		"active_slabs": "2", "total_malloced": "68157440",
	}
	got, err := parseSlabStats(fields)
	if err != nil {
		t.Fatal(err)
	}
	want := slabStats{totalMalloced: 68157440, classes: map[int]slabClass{
		1:  {chunksPerPage: 10922, totalPages: 1, freeChunks: 10900},
		12: {chunksPerPage: 885, totalPages: 64, freeChunks: 3},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	delete(fields, "12:free_chunks")
	if _, err := parseSlabStats(fields); !errors.Is(err, ErrProtocol) {
		t.Errorf("missing free_chunks: %v, want a protocol error", err)
	}
}

func FuzzReadRESP(f *testing.F) {
	for _, seed := range []string{
		"+OK\r\n", ":1\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*2\r\n$1\r\na\r\n:2\r\n", "-ERR x\r\n",
		"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "$5\r\nab\r\n", "*3\r\n", "$99999999999999999999\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(strings.NewReader(string(data)))
		for range 8 { // several replies in a row, as on a pipelined connection
			if _, err := readRESP(r); err != nil {
				var re *redisError
				if !errors.As(err, &re) {
					return
				}
			}
		}
	})
}

func FuzzParseMetadumpLine(f *testing.F) {
	for _, seed := range []string{
		"key=k2%3A64070 exp=-1 la=1795317559 cas=159669 fetch=no cls=12 size=967",
		"key=%00%FF exp=1 la=0 cas=0 fetch=yes cls=63 size=1048576",
		"key=%", "la=1 la=2", "key=a la=1 fetch=no cls=99999999999 size=1",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		item, err := parseMetadumpLine(line)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("non-protocol error %v", err)
			}
			return
		}
		if len(item.key) == 0 || item.lastAccess < 0 || item.size < 0 || item.class < 0 {
			t.Fatalf("accepted an impossible item %+v from %q", item, line)
		}
		if line, ok := metaDeleteLine(item.key); ok && strings.Count(line, "\r\n") != 1 {
			t.Fatalf("delete command for %q spans lines: %q", item.key, line)
		}
	})
}

func FuzzParseRedisInfo(f *testing.F) {
	for _, seed := range []string{
		"# Keyspace\r\ndb0:keys=3,expires=0\r\n", "db:keys=1\r\n", "dbx:keys=1", "db1:keys=", "used_memory:1\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		keys, err := keyspaceKeys(parseRedisInfo(text))
		if err == nil && keys < 0 {
			t.Fatalf("negative key count %d", keys)
		}
		if err != nil && !errors.Is(err, ErrProtocol) {
			t.Fatalf("non-protocol error %v", err)
		}
	})
}
