package ratelimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/ankusa/ankusa/internal/store"
)

// ErrBadLimit is a refused override.
var ErrBadLimit = errors.New("invalid rate limit")

// Overrides are the runtime per-tenant limits set through the operator API,
// persisted in the store (r + tenant → JSON) so they survive a restart, and
// layered over the configured ones: override, then rate_limits.tenants,
// then rate_limits.default.
type Overrides struct {
	st  *store.Store
	g   *GCRA
	cfg map[string]Limit // rate_limits.tenants

	mu  sync.Mutex // serialises writes so the store and the limiter agree
	set map[string]Limit
}

type limitJSON struct {
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
}

// LoadOverrides reads the persisted overrides into g.
func LoadOverrides(st *store.Store, g *GCRA, configured map[string]Limit) (*Overrides, error) {
	o := &Overrides{st: st, g: g, cfg: configured, set: map[string]Limit{}}
	err := st.ScanRateOverrides(func(tenant string, v []byte) bool {
		var l limitJSON
		if json.Unmarshal(v, &l) == nil {
			o.set[tenant] = Limit(l)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("load rate-limit overrides: %w", err)
	}
	for t, l := range o.set {
		g.SetLimit(t, l)
	}
	return o, nil
}

// Validate applies the config's rules to an override.
func Validate(l Limit) error {
	switch {
	case math.IsNaN(l.Rate) || l.Rate < 0.01 || l.Rate > 1_000_000:
		return fmt.Errorf("%w: rate must be between 0.01 and 1000000 per second", ErrBadLimit)
	case l.Burst < 0 || l.Burst > 10_000_000:
		return fmt.Errorf("%w: burst must be between 1 and 10000000", ErrBadLimit)
	}
	return nil
}

// Put sets and persists tenant's override (a synced write, then the limiter).
func (o *Overrides) Put(tenant string, l Limit) (Limit, error) {
	if err := Validate(l); err != nil {
		return Limit{}, err
	}
	if l.Burst == 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate)))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	v, _ := json.Marshal(limitJSON(l))
	b := o.st.NewBatch()
	defer b.Close()
	_ = b.PutRateOverride(tenant, v)
	if err := o.st.ApplySync(b); err != nil {
		return Limit{}, fmt.Errorf("persist rate limit of %s: %w", tenant, err)
	}
	o.set[tenant] = l
	o.g.SetLimit(tenant, l)
	return l, nil
}

// Delete removes tenant's override; the configured limit applies again.
// It reports whether there was one.
func (o *Overrides) Delete(tenant string) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.set[tenant]; !ok {
		return false, nil
	}
	b := o.st.NewBatch()
	defer b.Close()
	_ = b.DeleteRateOverride(tenant)
	if err := o.st.ApplySync(b); err != nil {
		return false, fmt.Errorf("delete rate limit of %s: %w", tenant, err)
	}
	delete(o.set, tenant)
	if l, ok := o.cfg[tenant]; ok {
		o.g.SetLimit(tenant, l)
	} else {
		o.g.DeleteLimit(tenant)
	}
	return true, nil
}

// Effective is tenant's limit in force and where it comes from:
// override | config | default | unlimited.
func (o *Overrides) Effective(tenant string) (Limit, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l, ok := o.set[tenant]; ok {
		return l, "override"
	}
	if l, ok := o.cfg[tenant]; ok {
		return l, "config"
	}
	if d := o.g.Default(); !d.Unlimited() {
		return d, "default"
	}
	return Limit{}, "unlimited"
}

// List returns the overrides.
func (o *Overrides) List() map[string]Limit {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]Limit, len(o.set))
	for k, v := range o.set {
		out[k] = v
	}
	return out
}
