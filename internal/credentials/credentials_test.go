package credentials

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestGenerateIsRandomAndURLSafe(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		p, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil || len(raw) != PasswordBytes {
			t.Fatalf("password %q: decoded %d bytes, err %v; want %d random bytes", p, len(raw), err, PasswordBytes)
		}
		if seen[p] {
			t.Fatalf("password %q generated twice", p)
		}
		seen[p] = true
	}
}

func TestHashAndVerify(t *testing.T) {
	password, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	h1, err := Hash(password)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := Hash(password)
	if err != nil {
		t.Fatal(err)
	}
	if h1 == h2 {
		t.Fatalf("two hashes of one password are equal (%q): the salt is not random", h1)
	}
	if !strings.HasPrefix(h1, "sha256:") || strings.Count(h1, ":") != 2 {
		t.Fatalf("hash %q is not sha256:<salt>:<digest>", h1)
	}
	if !Valid(h1) {
		t.Fatalf("Valid(%q) = false", h1)
	}
	cases := []struct {
		name     string
		encoded  string
		password string
		want     bool
	}{
		{"right password", h1, password, true},
		{"right password, other salt", h2, password, true},
		{"wrong password", h1, password + "x", false},
		{"empty password", h1, "", false},
		{"prefix of password", h1, password[:len(password)-1], false},
		{"empty encoding", "", password, false},
		{"unknown scheme", "md5" + h1[len("sha256"):], password, false},
		{"missing digest", h1[:strings.LastIndex(h1, ":")], password, false},
		{"bad base64 salt", "sha256:!!!:" + h1[strings.LastIndex(h1, ":")+1:], password, false},
		{"short digest", h1[:len(h1)-4], password, false},
		{"extra field", h1 + ":x", password, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Verify(tc.encoded, tc.password); got != tc.want {
				t.Fatalf("Verify(%q, %q) = %v, want %v", tc.encoded, tc.password, got, tc.want)
			}
		})
	}
}

func TestHashRejectsEmptyPassword(t *testing.T) {
	if _, err := Hash(""); err == nil {
		t.Fatal("Hash(\"\") succeeded")
	}
}

func TestSecretKeyRoundTrip(t *testing.T) {
	cases := []struct {
		tenant, key string
	}{
		{"team-a/cache", "team-a.cache"},
		{"ns/name.with.dots", "ns.name.with.dots"},
		{"a/b", "a.b"},
		{strings.Repeat("n", 63) + "/" + strings.Repeat("x", 253), strings.Repeat("n", 63) + "." + strings.Repeat("x", 253)},
	}
	for _, tc := range cases {
		key, err := SecretKey(tc.tenant)
		if err != nil || key != tc.key {
			t.Fatalf("SecretKey(%q) = %q, %v; want %q", tc.tenant, key, err, tc.key)
		}
		tenant, err := TenantFromSecretKey(key)
		if err != nil || tenant != tc.tenant {
			t.Fatalf("TenantFromSecretKey(%q) = %q, %v; want %q", key, tenant, err, tc.tenant)
		}
	}
}

func TestBadTenantIDs(t *testing.T) {
	for _, id := range []string{
		"", "noslash", "/name", "ns/", "ns/name/extra", "Ns/name", "ns/Name", "n.s/name",
		"-ns/name", "ns-/name", "ns/-name", "ns/name.", "ns/.name", "ns/a..b", "ns/na me",
		strings.Repeat("n", 64) + "/name", "ns/" + strings.Repeat("x", 254),
	} {
		if key, err := SecretKey(id); err == nil {
			t.Errorf("SecretKey(%q) = %q, want an error", id, key)
		}
	}
}

func TestBadSecretKeys(t *testing.T) {
	for _, key := range []string{
		"", "nodot", ".name", "ns.", "NS.name", "ns.Name", "ns/x.name", "ns.a/b", "ns.a..b", "-ns.name",
	} {
		if tenant, err := TenantFromSecretKey(key); err == nil {
			t.Errorf("TenantFromSecretKey(%q) = %q, want an error", key, tenant)
		}
	}
}

func FuzzVerify(f *testing.F) {
	h, err := Hash("password")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(h, "password")
	f.Add(h, "")
	f.Add("sha256::", "x")
	f.Add("sha256:AAAA:AAAA", "x")
	f.Add(":::", "")
	f.Fuzz(func(t *testing.T, encoded, password string) {
		ok := Verify(encoded, password)
		if ok && !Valid(encoded) {
			t.Fatalf("Verify accepted the malformed encoding %q", encoded)
		}
		if encoded == h && ok != (password == "password") {
			t.Fatalf("Verify(%q, %q) = %v", encoded, password, ok)
		}
	})
}

func FuzzTenantFromSecretKey(f *testing.F) {
	for _, s := range []string{"team-a.cache", "ns.name.with.dots", "", ".", "a.", ".b", "A.b", "a/b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		tenant, err := TenantFromSecretKey(key)
		if err != nil {
			return
		}
		back, err := SecretKey(tenant)
		if err != nil {
			t.Fatalf("TenantFromSecretKey(%q) = %q, which SecretKey rejects: %v", key, tenant, err)
		}
		if back != key {
			t.Fatalf("round trip %q -> %q -> %q", key, tenant, back)
		}
	})
}

func TestIssueGivesAPasswordItsHashVerifies(t *testing.T) {
	password, hash, err := Issue()
	if err != nil {
		t.Fatal(err)
	}
	if len(password) != 43 || !Verify(hash, password) || Verify(hash, password+"x") {
		t.Errorf("Issue() = %q, %q: the hash does not verify exactly its password", password, hash)
	}
}
