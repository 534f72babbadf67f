package edge

import "sync"

// Registry is the set of catch URLs the edge answers. Static sources come
// from the config; API-managed ones are added, replaced and removed at
// runtime and take effect on the next request.
type Registry struct {
	mu      sync.RWMutex
	sources map[string]*Source
}

// NewRegistry builds a registry holding srcs.
func NewRegistry(srcs map[string]*Source) *Registry {
	r := &Registry{sources: make(map[string]*Source, len(srcs))}
	for id, s := range srcs {
		r.sources[id] = s
	}
	return r
}

// Get returns the source with id.
func (r *Registry) Get(id string) (*Source, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.sources[id]
	return s, ok
}

// Put adds or replaces a source.
func (r *Registry) Put(s *Source) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sources[s.ID] = s
}

// Delete removes a source.
func (r *Registry) Delete(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sources, id)
}
