package rederive

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"sync"

	"github.com/auditd/auditd/rederive/fold"
	"github.com/auditd/auditd/rederive/spec"
)

// Registry holds compiled derivations by name: those compiled from specs
// and those written in Go. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]registryEntry
}

type registryEntry struct {
	d    fold.Derivation
	spec *spec.Spec
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{entries: make(map[string]registryEntry)}
}

// Register adds a derivation under d.Name(). spec, if not nil, says how
// its result is checked: store, compare, grace, confirm_runs, lineage,
// error_budget, intervals; its Name must be empty or d.Name(), and its
// sources and expression fields are ignored (d says what it folds). A nil spec
// registers a derivation that is folded but not compared. A name already registered is an error.
func (r *Registry) Register(d fold.Derivation, sp *spec.Spec) error {
	name := d.Name()
	if !spec.ValidName(name) {
		return fmt.Errorf("rederive: register: invalid name %q: want [a-z0-9][a-z0-9_.-]*", name)
	}
	if len(d.Sources()) == 0 {
		return fmt.Errorf("rederive: register %q: no sources", name)
	}
	for _, src := range d.Sources() {
		if _, err := path.Match(src, ""); err != nil || src == "" {
			return fmt.Errorf("rederive: register %q: bad source pattern %q", name, src)
		}
	}
	if sp != nil {
		if sp.Name != "" && sp.Name != name {
			return fmt.Errorf("rederive: register %q: spec is named %q", name, sp.Name)
		}
		if err := sp.CheckSettings(); err != nil {
			return fmt.Errorf("rederive: register %q: %w", name, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, dup := r.entries[name]; dup {
		where := ""
		if prev.spec != nil && prev.spec.File != "" {
			where = fmt.Sprintf(" (declared at %s:%d)", prev.spec.File, prev.spec.Line)
		}
		return fmt.Errorf("rederive: register: duplicate derivation name %q%s", name, where)
	}
	r.entries[name] = registryEntry{d: d, spec: sp}
	return nil
}

// RegisterSpecs compiles specs and registers each with its spec. Every
// error is reported; the specs that compiled are registered.
func (r *Registry) RegisterSpecs(specs ...*spec.Spec) error {
	var errs []error
	for _, s := range specs {
		d, err := spec.Compile(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.Register(d, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Lookup returns the derivation registered under name and its spec (nil
// for a derivation registered without one).
func (r *Registry) Lookup(name string) (fold.Derivation, *spec.Spec, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[name]
	return e.d, e.spec, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.entries))
}
