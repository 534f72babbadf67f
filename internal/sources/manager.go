// Package sources manages the sources the operator API adds at run time
// (source_store.type: persistent). An API source belongs to a tenant and has
// the id "<tenant>.<name>"; its block is JSON in the config file's source
// schema, checked by the same rules as a source in the config file (the
// Schema the app implements over internal/config), and kept as JSON in the
// store (store.PutSource), so it survives restarts. A change takes effect
// on the next request: the Manager updates the edge's Registry and the
// dispatcher's targets in place.
//
// Secrets are write-only: views are redacted (Schema.Redacted), and an
// update that leaves a secret out keeps the stored one (Schema.Check).
package sources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/ankusa/ankusa/internal/dispatch"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/sink"
	"github.com/ankusa/ankusa/internal/store"
)

// Errors the operator API maps to statuses.
var (
	// ErrInvalid: the block or the id breaks a rule (400 invalid_source).
	// Errors matching it are *InvalidError, whose text is the message.
	ErrInvalid = errors.New("invalid source")
	// ErrExists: the id is taken (409 source_exists).
	ErrExists = errors.New("source exists")
	// ErrNotFound: no API source has the id (404 source_not_found).
	ErrNotFound = errors.New("source not found")
	// ErrHasDeliveries: a delete was refused because deliveries are
	// pending (409 source_has_deliveries). Errors matching it are
	// *DeliveriesError.
	ErrHasDeliveries = errors.New("source has pending deliveries")
)

// InvalidError is a rule violation; Error is the operator's message (the
// Schema's, e.g. "sources.<id>.<key>: <rule>; …"), and Unwrap gives the
// Schema's error.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string        { return e.Err.Error() }
func (e *InvalidError) Unwrap() error        { return e.Err }
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// DeliveriesError is a refused delete: Due rows wait for a retry and
// Inflight ones are being attempted right now.
type DeliveriesError struct {
	Due, Inflight int
}

func (e *DeliveriesError) Is(target error) bool { return target == ErrHasDeliveries }

func (e *DeliveriesError) Error() string {
	if e.Inflight > 0 {
		return fmt.Sprintf("%d deliveries are being attempted right now and %d are due: retry in a moment (with deliveries=dead_letter to dead-letter the due ones)", e.Inflight, e.Due)
	}
	return fmt.Sprintf("%d deliveries are still due: deliver them first, or delete with deliveries=dead_letter to move them to the dead-letter queue", e.Due)
}

// DeadLetterReason is the reason of the dead rows a delete with
// deliveries=dead_letter writes.
const DeadLetterReason = "source deleted"

// recordFormat versions the stored JSON; a reader refuses another version.
const recordFormat = 1

var partRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Options configure a Manager. Every field but Static, Routing, Prefix,
// Logger and Now is required.
type Options struct {
	Store    *store.Store
	Registry *edge.Registry
	Dispatch *dispatch.Dispatcher
	// Schema knows the source block: its rules, defaults and secrets, and
	// how to build what it describes.
	Schema Schema
	// Static reports whether id is a source of the config file: a stored
	// API source of that id is never loaded over it. Nil: none is.
	Static func(id string) bool
	// Routing and Prefix are http.routing ("path" or "tenant_path") and
	// http.prefix: they shape the catch URLs.
	Routing, Prefix string
	Logger          *slog.Logger
	Now             func() time.Time
}

// Schema is the rules of a source block: JSON in the config file's source
// schema, as the operator API takes it and the store keeps it. The app
// implements it over internal/config, so that the rules are the config
// file's and this package does not depend on config. Every error a method
// returns for a block is a broken rule, its text the operator's message.
type Schema interface {
	// Bind binds block to tenant (a block naming another tenant is
	// refused) and fills the defaults of the keys it leaves out.
	Bind(id, tenant string, block json.RawMessage) (json.RawMessage, error)
	// Check is the write-time check of a bound block. On an update (prev,
	// the stored block, non-nil) it first keeps the secrets block leaves
	// out or sends back as "[REDACTED]", never for a sink whose
	// destination changed; then it refuses any "[REDACTED]" left and
	// applies the rules. It returns the block to store.
	Check(id string, block, prev json.RawMessage) (json.RawMessage, error)
	// Validate applies the rules alone (a stored block at Load).
	Validate(id string, block json.RawMessage) error
	// Redacted is block as views show it, every secret replaced.
	Redacted(block json.RawMessage) map[string]any
	// SinkIDs lists the ids of block's sinks, in order.
	SinkIDs(block json.RawMessage) ([]string, error)
	// Build builds the edge source of block (its verifier and dedupe
	// extractor, its sinks numbered by nums) and one constructor per sink,
	// in block order.
	Build(id string, block json.RawMessage, nums map[store.SinkRef]uint16) (*edge.Source, []SinkBuilder, error)
}

// SinkBuilder builds one sink of a block.
type SinkBuilder struct {
	ID    string
	Build func() (sink.Sink, error)
}

// Manager owns the API sources of one instance. Its methods are safe for
// concurrent use; changes are serialised (store.SinkNumbers requires one
// caller at a time, and the app calls it only once, at start-up, before
// the Manager exists).
type Manager struct {
	o   Options
	log *slog.Logger

	mu   sync.RWMutex
	srcs map[string]*entry
}

// entry is one registered API source.
type entry struct {
	rec   record
	src   *edge.Source
	nums  []uint16 // in sink order
	sinks map[uint16]*guarded
}

func (e *entry) closeSinks() {
	for _, g := range e.sinks {
		_ = g.Close()
	}
}

// record is the stored form (store.PutSource). Config, the block, holds
// the secrets.
type record struct {
	Format    int             `json:"format"`
	Tenant    string          `json:"tenant"`
	Name      string          `json:"name"`
	Config    json.RawMessage `json:"config"`
	CreatedAt string          `json:"created_at"`
	UpdatedAt string          `json:"updated_at"`
}

func (r *record) id() string { return r.Tenant + "." + r.Name }

// View is an API source as the operator API shows it: Config is redacted.
type View struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	// CatchURL is the path providers POST to.
	CatchURL  string         `json:"catch_url"`
	Config    map[string]any `json:"config"`
	CreatedAt string         `json:"created_at"`
	UpdatedAt string         `json:"updated_at"`
}

// Deleted reports a delete.
type Deleted struct {
	ID string `json:"id"`
	// DeadLettered counts the due deliveries moved to the dead-letter
	// queue (deliveries=dead_letter).
	DeadLettered int `json:"dead_lettered"`
}

// New builds a Manager; Load registers the stored sources.
func New(o Options) *Manager {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Manager{o: o, log: o.Logger.With("component", "sources"), srcs: map[string]*entry{}}
}

// ID is the source id of an API source: "<tenant>.<name>".
func ID(tenant, name string) string { return tenant + "." + name }

// Load reads every stored API source, builds its verifier and sinks and
// registers it. A source that no longer passes the rules, or whose sink
// cannot be built, fails Load (naming it), like a bad static source fails
// boot. Sources of the config file are never shadowed: a stored id that is
// also a static one is skipped with a warning. Sources already loaded are
// left as they are.
func (m *Manager) Load() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var recs []record
	var bad error
	err := m.o.Store.ScanSources(func(id string, v []byte) bool {
		var r record
		if err := json.Unmarshal(v, &r); err != nil {
			bad = fmt.Errorf("stored source %q: %w", id, err)
			return false
		}
		if r.Format != recordFormat {
			bad = fmt.Errorf("stored source %q: unknown format %d (this version reads %d)", id, r.Format, recordFormat)
			return false
		}
		if r.id() != id {
			bad = fmt.Errorf("stored source %q names %q", id, r.id())
			return false
		}
		recs = append(recs, r)
		return true
	})
	if err != nil {
		return fmt.Errorf("read API sources: %w", err)
	}
	if bad != nil {
		return bad
	}
	var refs []store.SinkRef
	keep := recs[:0]
	for _, r := range recs {
		id := r.id()
		if _, loaded := m.srcs[id]; loaded {
			continue
		}
		if m.o.Static != nil && m.o.Static(id) {
			m.log.Warn("stored API source is shadowed by a config source; not loaded", "source", id)
			continue
		}
		if err := m.o.Schema.Validate(id, r.Config); err != nil {
			return fmt.Errorf("stored API source %s no longer passes validation: %w", id, err)
		}
		sinks, err := m.o.Schema.SinkIDs(r.Config)
		if err != nil {
			return fmt.Errorf("stored API source %s: %w", id, err)
		}
		for _, k := range sinks {
			refs = append(refs, store.SinkRef{Source: id, Sink: k})
		}
		keep = append(keep, r)
	}
	if len(keep) == 0 {
		return nil
	}
	nums, err := m.o.Store.SinkNumbers(refs)
	if err != nil {
		return err
	}
	built := make([]*entry, 0, len(keep))
	for _, r := range keep {
		e, err := m.buildWith(r, nums)
		if err != nil {
			for _, b := range built {
				b.closeSinks()
			}
			return fmt.Errorf("stored API source %s: %w", r.id(), err)
		}
		built = append(built, e)
	}
	for _, e := range built {
		m.register(e, nil)
		m.srcs[e.rec.id()] = e
	}
	m.log.Info("loaded API sources", "count", len(built))
	return nil
}

// Close retires every API sink. The app's own close of the dispatcher's
// targets may close them too: Close is idempotent.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.srcs {
		e.closeSinks()
	}
}

// Create adds the source tenant.name with block sc. Its tenant is set to
// tenant (another non-empty tenant is refused); keys left out get their
// defaults. The source answers from the next request on.
func (m *Manager) Create(tenant, name string, sc json.RawMessage) (View, error) {
	id, sc, err := m.prepare(tenant, name, sc)
	if err != nil {
		return View{}, err
	}
	if sc, err = m.check(id, sc, nil); err != nil {
		return View{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.srcs[id]; ok {
		return View{}, ErrExists
	}
	if _, ok := m.o.Registry.Get(id); ok {
		return View{}, ErrExists // a source of the config file
	}
	now := m.stamp()
	rec := record{Format: recordFormat, Tenant: tenant, Name: name, Config: sc, CreatedAt: now, UpdatedAt: now}
	// Built first (no side effect but sink numbers, which are harmless),
	// persisted next, registered last: a crash never leaves a source that
	// answers but is not stored.
	e, err := m.build(rec)
	if err != nil {
		return View{}, err
	}
	if err := m.persist(rec); err != nil {
		e.closeSinks()
		return View{}, err
	}
	m.register(e, nil)
	m.srcs[id] = e
	m.log.Info("API source created", "source", id)
	return m.view(e), nil
}

// Update replaces the block of tenant.name. A secret left out (or sent
// back as "[REDACTED]") keeps the stored one: verify.secret unless the new
// verify.type is none, and per sink of the same id and type http.secret,
// http.headers values sent as "[REDACTED]", kafka.sasl.password,
// nats.password and nats.token. Replaced sinks are closed once their
// attempts end; rows still due for a removed sink are dead-lettered by
// dispatch ("sink is no longer configured") when attempted.
func (m *Manager) Update(tenant, name string, sc json.RawMessage) (View, error) {
	id, sc, err := m.prepare(tenant, name, sc)
	if err != nil {
		return View{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, ok := m.srcs[id]
	if !ok {
		return View{}, ErrNotFound
	}
	if sc, err = m.check(id, sc, prev.rec.Config); err != nil {
		return View{}, err
	}
	rec := prev.rec
	rec.Config, rec.UpdatedAt = sc, m.stamp()
	e, err := m.build(rec)
	if err != nil {
		return View{}, err
	}
	if err := m.persist(rec); err != nil {
		e.closeSinks()
		return View{}, err
	}
	m.register(e, prev)
	m.srcs[id] = e
	m.log.Info("API source updated", "source", id)
	return m.view(e), nil
}

// Get returns tenant.name.
func (m *Manager) Get(tenant, name string) (View, error) {
	id, err := apiID(tenant, name)
	if err != nil {
		return View{}, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, ok := m.srcs[id]
	if !ok {
		return View{}, ErrNotFound
	}
	return m.view(e), nil
}

// List returns the API sources of tenant, by name.
func (m *Manager) List(tenant string) ([]View, error) {
	if !partRE.MatchString(tenant) {
		return nil, invalidTenant(tenant)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := []View{}
	for _, e := range m.srcs {
		if e.rec.Tenant == tenant {
			out = append(out, m.view(e))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Delete removes tenant.name. It is refused (*DeliveriesError) while a
// delivery of the source is being attempted, and while one is due unless
// deadLetter, which moves the due rows to the dead-letter queue (reason
// DeadLetterReason) in one synced batch. The catch URL answers 404 from
// the next request on. Dedupe keys stay until their TTL, and sink numbers
// stay allocated: a source re-created under the same id gets the same
// numbers, so its dead rows can be replayed to it.
func (m *Manager) Delete(tenant, name string, deadLetter bool) (Deleted, error) {
	id, err := apiID(tenant, name)
	if err != nil {
		return Deleted{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.srcs[id]
	if !ok {
		return Deleted{}, ErrNotFound
	}
	due, inflight, err := m.pending(e)
	if err != nil {
		return Deleted{}, err
	}
	if inflight > 0 || (len(due) > 0 && !deadLetter) {
		return Deleted{}, &DeliveriesError{Due: len(due), Inflight: inflight}
	}
	// No new hook from here on, and an attempt that starts now finds no
	// sink, so dispatch itself dead-letters any row this delete misses
	// (one a request already past the registry commits after the scan).
	m.unregister(e)
	moved := 0
	if deadLetter {
		if moved, err = m.deadLetter(e); err != nil {
			m.restore(e)
			return Deleted{}, err
		}
	}
	b := m.o.Store.NewBatch()
	if b.Err() != nil {
		m.restore(e)
		return Deleted{}, store.ErrClosed
	}
	defer b.Close()
	_ = b.DeleteSource(id)
	if err := m.o.Store.ApplySync(b); err != nil {
		m.restore(e)
		return Deleted{}, fmt.Errorf("delete source %s: %w", id, err)
	}
	e.closeSinks()
	delete(m.srcs, id)
	m.log.Info("API source deleted", "source", id, "dead_lettered", moved)
	return Deleted{ID: id, DeadLettered: moved}, nil
}

// prepare checks the id, binds the block to tenant and fills defaults.
func (m *Manager) prepare(tenant, name string, sc json.RawMessage) (string, json.RawMessage, error) {
	id, err := apiID(tenant, name)
	if err != nil {
		return "", sc, err
	}
	sc, err = m.o.Schema.Bind(id, tenant, sc)
	if err != nil {
		return "", sc, &InvalidError{Err: err}
	}
	return id, sc, nil
}

// check is Schema.Check, its refusal an *InvalidError.
func (m *Manager) check(id string, sc, prev json.RawMessage) (json.RawMessage, error) {
	sc, err := m.o.Schema.Check(id, sc, prev)
	if err != nil {
		return nil, &InvalidError{Err: err}
	}
	return sc, nil
}

func apiID(tenant, name string) (string, error) {
	if !partRE.MatchString(tenant) {
		return "", invalidTenant(tenant)
	}
	if !partRE.MatchString(name) {
		return "", &InvalidError{Err: fmt.Errorf("name must match [A-Za-z0-9_-]{1,64}, got %q", name)}
	}
	return ID(tenant, name), nil
}

func invalidTenant(t string) error {
	return &InvalidError{Err: fmt.Errorf("tenant must match [A-Za-z0-9_-]{1,64}, got %q", t)}
}

// build allocates the sink numbers of rec and builds its entry. The caller
// holds m.mu (SinkNumbers needs a single caller).
func (m *Manager) build(rec record) (*entry, error) {
	id := rec.id()
	sinks, err := m.o.Schema.SinkIDs(rec.Config)
	if err != nil {
		return nil, &InvalidError{Err: err}
	}
	refs := make([]store.SinkRef, 0, len(sinks))
	for _, k := range sinks {
		refs = append(refs, store.SinkRef{Source: id, Sink: k})
	}
	nums, err := m.o.Store.SinkNumbers(refs)
	if err != nil {
		return nil, err
	}
	return m.buildWith(rec, nums)
}

// buildWith builds the edge source (verifier, dedupe extractor) the way
// static sources are built, and every sink.
func (m *Manager) buildWith(rec record, nums map[store.SinkRef]uint16) (*entry, error) {
	id := rec.id()
	src, builders, err := m.o.Schema.Build(id, rec.Config, nums)
	if err != nil {
		return nil, &InvalidError{Err: err}
	}
	e := &entry{rec: rec, src: src, sinks: map[uint16]*guarded{}}
	for _, k := range builders {
		num, ok := nums[store.SinkRef{Source: id, Sink: k.ID}]
		if !ok {
			e.closeSinks()
			return nil, fmt.Errorf("no sink number for %s/%s", id, k.ID)
		}
		s, err := k.Build()
		if err != nil {
			e.closeSinks()
			return nil, &InvalidError{Err: fmt.Errorf("sources.%s sink %s: %w", id, k.ID, err)}
		}
		e.nums = append(e.nums, num)
		e.sinks[num] = newGuarded(k.ID, s, m.log)
	}
	return e, nil
}

// register makes e live: its sinks first (a hook accepted under the new
// source must find them), then the catch URL, then the sinks prev had and
// e has not are removed.
func (m *Manager) register(e, prev *entry) {
	for _, num := range e.nums {
		g := e.sinks[num]
		if old, replaced := m.o.Dispatch.SetTarget(num, dispatch.Target{ID: g.id, Sink: g.target()}); replaced && old.Sink != nil {
			_ = old.Sink.Close()
		}
	}
	m.o.Registry.Put(e.src)
	if prev == nil {
		return
	}
	for num, g := range prev.sinks {
		if _, kept := e.sinks[num]; kept {
			continue // replaced (and closed) above
		}
		m.o.Dispatch.RemoveTarget(num)
		_ = g.Close()
	}
}

// unregister takes e off the edge and dispatch; its sinks stay open until
// the delete commits (restore puts them back).
func (m *Manager) unregister(e *entry) {
	m.o.Registry.Delete(e.rec.id())
	for _, num := range e.nums {
		m.o.Dispatch.RemoveTarget(num)
	}
}

func (m *Manager) restore(e *entry) {
	for _, num := range e.nums {
		g := e.sinks[num]
		m.o.Dispatch.SetTarget(num, dispatch.Target{ID: g.id, Sink: g.target()})
	}
	m.o.Registry.Put(e.src)
}

func (m *Manager) persist(rec record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode source %s: %w", rec.id(), err)
	}
	b := m.o.Store.NewBatch()
	if b.Err() != nil {
		return store.ErrClosed
	}
	defer b.Close()
	_ = b.PutSource(rec.id(), raw)
	if err := m.o.Store.ApplySync(b); err != nil {
		return fmt.Errorf("store source %s: %w", rec.id(), err)
	}
	return nil
}

type dueRow struct {
	at  int64
	seq uint64
	num uint16
}

// pending lists the due rows of e's sinks and counts those being attempted
// (the dispatcher's claims: such a row is due in the store, and is counted
// in flight, not due).
//
// The due rows are read first and the claims after: a row claimed while
// the scan ran is then in the snapshot, counted in flight (a 409), not
// taken for a due row a dead-lettering delete could move.
func (m *Manager) pending(e *entry) (due []dueRow, inflight int, err error) {
	all, err := m.dueRows(e)
	if err != nil {
		return nil, 0, err
	}
	inflight, claimed := m.o.Dispatch.InFlightOf(func(num uint16) bool { return e.sinks[num] != nil })
	for _, r := range all {
		if !claimed(r.at, r.seq, r.num) {
			due = append(due, r)
		}
	}
	return due, inflight, nil
}

func (m *Manager) dueRows(e *entry) ([]dueRow, error) {
	var due []dueRow
	err := m.o.Store.ScanDue(0, func(at int64, seq uint64, num uint16) bool {
		if e.sinks[num] != nil {
			due = append(due, dueRow{at, seq, num})
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("scan due deliveries: %w", err)
	}
	return due, nil
}

// deadLetter moves every due row of e's sinks to the dead-letter queue
// (reason DeadLetterReason). The dispatcher does the move on its own loop:
// it is the one writer of delivery rows, so no claim races the move and
// ankusa_queue_dead counts the rows at once. e is already unregistered, so
// an attempt dispatch starts on one of these rows first fails for want of a
// sink and is dead-lettered by dispatch itself, once.
func (m *Manager) deadLetter(e *entry) (int, error) {
	nums := make(map[uint16]bool, len(e.sinks))
	for num := range e.sinks {
		nums[num] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadLetterTimeout)
	defer cancel()
	return m.o.Dispatch.DeadLetterDue(ctx, nums, DeadLetterReason)
}

// deadLetterTimeout bounds the wait for the dispatcher's loop.
const deadLetterTimeout = 30 * time.Second

func (m *Manager) stamp() string { return m.o.Now().UTC().Format(time.RFC3339Nano) }

func (m *Manager) view(e *entry) View {
	id := e.rec.id()
	return View{
		ID: id, Tenant: e.rec.Tenant, Name: e.rec.Name, CatchURL: m.catchURL(e.rec.Tenant, id),
		Config: m.o.Schema.Redacted(e.rec.Config), CreatedAt: e.rec.CreatedAt, UpdatedAt: e.rec.UpdatedAt,
	}
}

// catchURL is the ingest path of a source under the configured routing.
func (m *Manager) catchURL(tenant, id string) string {
	if m.o.Routing == "tenant_path" {
		return m.o.Prefix + "/" + tenant + "/" + id
	}
	return m.o.Prefix + "/" + id
}
