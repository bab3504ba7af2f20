package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/cacheqos/cacheqos/api/v1alpha1"
)

// StandaloneConfig runs the agent from files instead of the API server, for local runs and
// benchmarks. The pass is the same as in a cluster.
type StandaloneConfig struct {
	// PlanFile is a CacheNodePlan manifest (YAML or JSON).
	PlanFile string
	// CredentialsFile is a Secret manifest with the credential hashes and the peer token, as
	// the operator writes it (data, base64, or stringData). Empty: the plan's tenants have no
	// credentials.
	CredentialsFile string
	// StatusFile, if set, receives the plan with its status after every pass (YAML).
	StatusFile string
	// Interval is how often both files are read again and status refreshed (default: the
	// agent's RefreshInterval).
	Interval time.Duration
	// Applied, if set, receives every pass's status once the status file is written (for
	// tests waiting on a generation).
	Applied func(v1.CacheNodePlanStatus)
}

// RunStandalone applies the plan file until ctx ends: at once, after every engine state
// change, and every Interval with the files read again. A plan file that cannot be read at
// the start is an error; later, the last good plan stays in force and the problem is logged.
func (a *Agent) RunStandalone(ctx context.Context, sc StandaloneConfig) error {
	if sc.Interval <= 0 {
		sc.Interval = a.cfg.RefreshInterval
	}
	plan, err := LoadPlan(sc.PlanFile)
	if err != nil {
		return err
	}
	ticker := time.NewTicker(sc.Interval)
	defer ticker.Stop()
	for {
		creds := loadCredentials(sc.CredentialsFile)
		plan.Status = a.Apply(ctx, plan, creds)
		if sc.StatusFile != "" {
			if err := writeManifest(sc.StatusFile, plan); err != nil {
				a.log.Error("writing the status file", "file", sc.StatusFile, "error", err)
			}
		}
		if sc.Applied != nil {
			sc.Applied(plan.Status)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.changes:
		case <-ticker.C:
			next, err := LoadPlan(sc.PlanFile)
			if err != nil {
				a.log.Error("reading the plan file; keeping the last good plan", "error", err)
				continue
			}
			next.Status = plan.Status
			plan = next
		}
	}
}

// LoadPlan reads a CacheNodePlan manifest. Unknown fields are errors, so a typo fails loudly
// instead of being ignored.
func LoadPlan(path string) (*v1.CacheNodePlan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the plan file: %w", err)
	}
	var plan v1.CacheNodePlan
	if err := yaml.UnmarshalStrict(data, &plan); err != nil {
		return nil, fmt.Errorf("plan file %s: %w", path, err)
	}
	if gvk := plan.GroupVersionKind(); gvk != v1.GroupVersion.WithKind("CacheNodePlan") {
		return nil, fmt.Errorf("plan file %s holds apiVersion %q kind %q, want %s CacheNodePlan", path, plan.APIVersion, plan.Kind, v1.GroupVersion)
	}
	return &plan, nil
}

// LoadSecret reads a Secret manifest; stringData entries override data as the API server
// would merge them.
func LoadSecret(path string) (*corev1.Secret, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the credentials file: %w", err)
	}
	var secret corev1.Secret
	if err := yaml.UnmarshalStrict(data, &secret); err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	if secret.APIVersion != "v1" || secret.Kind != "Secret" {
		return nil, fmt.Errorf("credentials file %s holds apiVersion %q kind %q, want v1 Secret", path, secret.APIVersion, secret.Kind)
	}
	if secret.Data == nil {
		secret.Data = make(map[string][]byte, len(secret.StringData))
	}
	for k, v := range secret.StringData {
		secret.Data[k] = []byte(v)
	}
	secret.StringData = nil
	return &secret, nil
}

func loadCredentials(path string) Credentials {
	if path == "" {
		return Credentials{Err: errors.New("no credentials file was given, so no tenant can authenticate")}
	}
	secret, err := LoadSecret(path)
	if err != nil {
		return Credentials{Secret: path, Err: err}
	}
	return Credentials{Secret: cmp.Or(secret.Name, path), Data: maps.Clone(secret.Data)}
}

// writeManifest writes obj as YAML, atomically.
func writeManifest(path string, obj any) error {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
