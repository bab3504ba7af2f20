package promquery

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/config"
)

// NewHTTPClientFromSecret builds an HTTP client for Prometheus from the keys of a Secret
// (data): configKey holds prometheus/common's HTTP client configuration, whose *_ref fields
// (username_ref, password_ref, credentials_ref, client_secret_ref, ca_ref, cert_ref, key_ref)
// name other keys of data. The client reads those keys from data, so a new version of the
// Secret needs a new client. *_file fields and header files are refused: the configuration is
// written by whoever may write the Secret, and file paths would read the operator's own
// files (its service account token, say) and send them to a server of their choosing.
func NewHTTPClientFromSecret(data map[string][]byte, configKey string) (*http.Client, error) {
	content, ok := data[configKey]
	if !ok {
		return nil, fmt.Errorf("no key %q (keys: %s)", configKey, strings.Join(slices.Sorted(maps.Keys(data)), ", "))
	}
	cfg, err := config.LoadHTTPConfig(string(content))
	if err != nil {
		// The message goes to the CacheCluster's status, which tenants may read: YAML quotes
		// a misplaced value, which may be a password.
		return nil, fmt.Errorf("key %q: %s", configKey, quotedYAMLValue.ReplaceAllString(err.Error(), "(a value, not shown)"))
	}
	files, refs := credentialSources(cfg)
	if len(files) > 0 {
		return nil, fmt.Errorf("key %q: %s read files of the operator's file system; put the value inline, or in another key of the Secret named by the matching *_ref field", configKey, strings.Join(files, ", "))
	}
	for _, ref := range refs {
		if _, ok := data[ref.key]; !ok {
			return nil, fmt.Errorf("key %q: %s names key %q, which the Secret does not have", configKey, ref.field, ref.key)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("key %q: %w", configKey, err)
	}
	c, err := config.NewClientFromConfig(*cfg, "cacheqos", config.WithSecretManager(secretKeys(data)))
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", configKey, err)
	}
	c.Timeout = DefaultTimeout
	return c, nil
}

// quotedYAMLValue is a value as YAML's errors quote it.
var quotedYAMLValue = regexp.MustCompile("`[^`]*`")

// secretKeys serves *_ref fields from a Secret's keys, trimmed of surrounding white space as
// prometheus/common trims credential files (a key made with kubectl --from-file often ends in
// a newline).
type secretKeys map[string][]byte

func (s secretKeys) Fetch(_ context.Context, key string) (string, error) {
	v, ok := s[key]
	if !ok {
		return "", fmt.Errorf("the Secret has no key %q", key)
	}
	return strings.TrimSpace(string(v)), nil
}

// secretRef is a *_ref field's name and the key it names.
type secretRef struct{ field, key string }

// credentialSources lists the file fields set in cfg (by their YAML names) and the refs.
func credentialSources(cfg *config.HTTPClientConfig) (files []string, refs []secretRef) {
	add := func(field, file, ref string) {
		if file != "" {
			files = append(files, field+"_file")
		}
		if ref != "" {
			refs = append(refs, secretRef{field: field + "_ref", key: ref})
		}
	}
	tls := func(prefix string, t *config.TLSConfig) {
		add(prefix+"ca", t.CAFile, t.CARef)
		add(prefix+"cert", t.CertFile, t.CertRef)
		add(prefix+"key", t.KeyFile, t.KeyRef)
	}
	add("bearer_token", cfg.BearerTokenFile, "")
	if b := cfg.BasicAuth; b != nil {
		add("basic_auth.username", b.UsernameFile, b.UsernameRef)
		add("basic_auth.password", b.PasswordFile, b.PasswordRef)
	}
	if a := cfg.Authorization; a != nil {
		add("authorization.credentials", a.CredentialsFile, a.CredentialsRef)
	}
	if o := cfg.OAuth2; o != nil {
		add("oauth2.client_secret", o.ClientSecretFile, o.ClientSecretRef)
		tls("oauth2.tls_config.", &o.TLSConfig)
	}
	tls("tls_config.", &cfg.TLSConfig)
	if cfg.HTTPHeaders != nil {
		for _, name := range slices.Sorted(maps.Keys(cfg.HTTPHeaders.Headers)) {
			if len(cfg.HTTPHeaders.Headers[name].Files) > 0 {
				files = append(files, "http_headers."+name+".files")
			}
		}
	}
	return files, refs
}
