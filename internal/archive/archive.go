// Package archive keeps delivered hooks past their retention in an object
// store: segments of hooks, each signed, and a signed catalogue that lists
// them. It writes through the backup package's blob layer (backup.Store:
// file:// and s3://) and signs with its signature code, so an archive
// location is checked and configured like a backup location.
//
// Layout under the prefix:
//
//	<prefix>/archive/catalogue.json            signed catalogue (Catalogue)
//	<prefix>/archive/segments/<first>.seg      signed segment (Segment)
//
// <first> is "<delivered_at ms, 13 digits>-<seq, 20 digits>" of the
// segment's first hook: the sweep takes retained hooks oldest first, so a
// sweep retried after a crash starts at the same hook and writes the same
// key, and the catalogue keeps one entry per key (invariant A2).
//
// Invariants:
//
//	A1. A segment is durable in the store before the catalogue that lists
//	    it is written, and Write returns only once both are: a caller may
//	    delete its copy of the hooks once Write returned nil.
//	A2. The catalogue holds at most one entry per segment key; writing a
//	    key again replaces its entry (and its object), so a retried write
//	    never lists a hook twice.
//	A3. Nothing is returned from a segment whose bytes do not hash to its
//	    catalogue entry's sha256 or whose signature does not verify (one
//	    that verifies but is another write of its key is ErrStale).
package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ankusa/ankusa/internal/backup"
)

// Version is the segment and catalogue format version.
const Version = 1

// Signature domains (backup.Sign): one per kind of object, so a segment
// can never pass for a catalogue or a backup manifest.
const (
	segmentDomain   = "ankusa-archive-segment-v1\x00"
	catalogueDomain = "ankusa-archive-catalogue-v1\x00"
)

// maxObject bounds what is read back from the store for one object, so a
// hostile or broken object cannot exhaust memory.
const maxObject = 2 << 30

var (
	// ErrBadSignature: a segment or catalogue that does not verify with the
	// signing key, or whose bytes differ from its catalogue entry.
	ErrBadSignature = errors.New("archive: signature does not verify")
	// ErrCorrupt: an object that cannot be parsed.
	ErrCorrupt = errors.New("archive: corrupt object")
	// ErrStale: a segment whose bytes differ from its catalogue entry but
	// are a segment of its key that verifies: it was written again (A2)
	// after that catalogue was read, as Write puts the segment before the
	// catalogue. Worth reading the catalogue again; a caller that keeps
	// meeting it for one entry may treat it as ErrBadSignature (an older
	// signed copy put back in place verifies too).
	ErrStale = errors.New("archive: segment written again since its catalogue entry")
)

// Attempt is one logged attempt of an archived hook.
type Attempt struct {
	Sink      string `json:"sink"`
	N         uint32 `json:"n"`
	AtMs      int64  `json:"at_ms"`
	Result    string `json:"result"`
	LatencyMs int64  `json:"latency_ms"`
	Error     string `json:"error,omitempty"`
	ReplayID  string `json:"replay_id,omitempty"`
}

// Hook is one archived hook.
type Hook struct {
	Seq           uint64 `json:"seq"`
	ID            string `json:"id"`
	Tenant        string `json:"tenant"`
	Source        string `json:"source"`
	ReceivedAtNs  int64  `json:"received_at_ns"`
	DeliveredAtMs int64  `json:"delivered_at_ms"`
	// Envelope is the store's encoding of the hook (store.EncodeEnvelope):
	// body, headers, id, dedupe key, byte for byte.
	Envelope []byte    `json:"envelope"`
	Attempts []Attempt `json:"attempts"`
}

// Segment is the signed content of one segment object.
type Segment struct {
	Version   int    `json:"version"`
	Key       string `json:"key"`
	CreatedAt string `json:"created_at"`
	Hooks     []Hook `json:"hooks"`
}

// Entry is one segment in the catalogue.
type Entry struct {
	Key            string `json:"key"`
	Count          int    `json:"count"`
	Bytes          int64  `json:"bytes"`  // the segment object's size
	SHA256         string `json:"sha256"` // of the segment object
	FirstSeq       uint64 `json:"first_seq"`
	LastSeq        uint64 `json:"last_seq"`
	MinReceivedNs  int64  `json:"min_received_ns"`
	MaxReceivedNs  int64  `json:"max_received_ns"`
	MinDeliveredMs int64  `json:"min_delivered_ms"`
	MaxDeliveredMs int64  `json:"max_delivered_ms"`
	WrittenAt      string `json:"written_at"`
}

// Catalogue is the signed index of the archive.
type Catalogue struct {
	Version  int     `json:"version"`
	Segments []Entry `json:"segments"` // sorted by Key
}

type signed struct {
	Signature string          `json:"signature"`
	Payload   json.RawMessage `json:"payload"`
}

// Options configure an Archive.
type Options struct {
	Store  backup.Store
	Prefix string // "" = the store's root
	// SigningKey signs segments and the catalogue (HMAC-SHA256).
	SigningKey []byte
	Logger     *slog.Logger
	Now        func() time.Time
}

// Archive reads and writes one archive location. Write is meant for one
// writer per location (the node's dispatcher); reads may run alongside.
type Archive struct {
	o   Options
	log *slog.Logger

	mu  sync.Mutex
	cat *Catalogue // cached after the first read or write
}

// New checks o and returns an Archive; it does not touch the store.
func New(o Options) (*Archive, error) {
	if o.Store == nil {
		return nil, errors.New("archive: no store")
	}
	if len(o.SigningKey) < 16 {
		return nil, errors.New("archive: signing key shorter than 16 bytes")
	}
	if o.Prefix != "" && (strings.HasPrefix(o.Prefix, "/") || path.Clean(o.Prefix) != o.Prefix) {
		return nil, fmt.Errorf("archive: prefix %q is not a clean relative path", o.Prefix)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Archive{o: o, log: o.Logger.With("component", "archive")}, nil
}

func (a *Archive) key(rel string) string {
	if a.o.Prefix == "" {
		return "archive/" + rel
	}
	return a.o.Prefix + "/archive/" + rel
}

// SegmentKey is the key of a segment whose first hook is (deliveredAtMs, seq).
func (a *Archive) SegmentKey(deliveredAtMs int64, seq uint64) string {
	return a.key(fmt.Sprintf("segments/%013d-%020d.seg", deliveredAtMs, seq))
}

// Write stores hooks (oldest first, at least one) as one segment, then
// lists it in the catalogue (A1, A2). The segment's key comes from its
// first hook.
func (a *Archive) Write(ctx context.Context, hooks []Hook) (Entry, error) {
	if len(hooks) == 0 {
		return Entry{}, errors.New("archive: empty segment")
	}
	now := a.o.Now().UTC()
	seg := Segment{Version: Version, Key: a.SegmentKey(hooks[0].DeliveredAtMs, hooks[0].Seq),
		CreatedAt: now.Format(time.RFC3339Nano), Hooks: hooks}
	raw, err := json.Marshal(seg)
	if err != nil {
		return Entry{}, fmt.Errorf("archive: encode segment: %w", err)
	}
	obj, err := json.Marshal(signed{Signature: backup.Sign(segmentDomain, a.o.SigningKey, raw), Payload: raw})
	if err != nil {
		return Entry{}, fmt.Errorf("archive: encode segment: %w", err)
	}
	sum := sha256.Sum256(obj)
	e := Entry{Key: seg.Key, Count: len(hooks), Bytes: int64(len(obj)), SHA256: hex.EncodeToString(sum[:]),
		FirstSeq: hooks[0].Seq, LastSeq: hooks[0].Seq, MinReceivedNs: hooks[0].ReceivedAtNs, MaxReceivedNs: hooks[0].ReceivedAtNs,
		MinDeliveredMs: hooks[0].DeliveredAtMs, MaxDeliveredMs: hooks[0].DeliveredAtMs, WrittenAt: seg.CreatedAt}
	for _, h := range hooks[1:] {
		e.FirstSeq, e.LastSeq = min(e.FirstSeq, h.Seq), max(e.LastSeq, h.Seq)
		e.MinReceivedNs, e.MaxReceivedNs = min(e.MinReceivedNs, h.ReceivedAtNs), max(e.MaxReceivedNs, h.ReceivedAtNs)
		e.MinDeliveredMs, e.MaxDeliveredMs = min(e.MinDeliveredMs, h.DeliveredAtMs), max(e.MaxDeliveredMs, h.DeliveredAtMs)
	}
	// A1: the segment first; the backup.Store contract makes Put durable
	// and atomic.
	if err := a.o.Store.Put(ctx, seg.Key, bytes.NewReader(obj)); err != nil {
		return Entry{}, fmt.Errorf("archive: write segment: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	cat, err := a.catalogueLocked(ctx)
	if err != nil {
		return Entry{}, err
	}
	next := Catalogue{Version: Version, Segments: slices.Clone(cat.Segments)}
	i := sort.Search(len(next.Segments), func(i int) bool { return next.Segments[i].Key >= e.Key })
	if i < len(next.Segments) && next.Segments[i].Key == e.Key {
		next.Segments[i] = e // A2: a retried write replaces its entry
	} else {
		next.Segments = slices.Insert(next.Segments, i, e)
	}
	if err := a.putCatalogue(ctx, &next); err != nil {
		return Entry{}, err
	}
	a.cat = &next
	return e, nil
}

func (a *Archive) putCatalogue(ctx context.Context, c *Catalogue) error {
	raw, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("archive: encode catalogue: %w", err)
	}
	obj, err := json.Marshal(signed{Signature: backup.Sign(catalogueDomain, a.o.SigningKey, raw), Payload: raw})
	if err != nil {
		return fmt.Errorf("archive: encode catalogue: %w", err)
	}
	if err := a.o.Store.Put(ctx, a.key("catalogue.json"), bytes.NewReader(obj)); err != nil {
		return fmt.Errorf("archive: write catalogue: %w", err)
	}
	return nil
}

// Catalogue returns the catalogue (empty when none was written yet). It is
// read from the store once and then served from memory: this process is
// the location's only writer.
func (a *Archive) Catalogue(ctx context.Context) (Catalogue, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.catalogueLocked(ctx)
	if err != nil {
		return Catalogue{}, err
	}
	return Catalogue{Version: c.Version, Segments: slices.Clone(c.Segments)}, nil
}

func (a *Archive) catalogueLocked(ctx context.Context) (*Catalogue, error) {
	if a.cat != nil {
		return a.cat, nil
	}
	obj, err := a.read(ctx, a.key("catalogue.json"))
	if errors.Is(err, backup.ErrNotFound) {
		a.cat = &Catalogue{Version: Version, Segments: []Entry{}}
		return a.cat, nil
	}
	if err != nil {
		return nil, err
	}
	raw, err := a.open(catalogueDomain, obj, "catalogue")
	if err != nil {
		return nil, err
	}
	var c Catalogue
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%w: catalogue: %w", ErrCorrupt, err)
	}
	if c.Version != Version {
		return nil, fmt.Errorf("%w: catalogue version %d, this build reads %d", ErrCorrupt, c.Version, Version)
	}
	sort.Slice(c.Segments, func(i, j int) bool { return c.Segments[i].Key < c.Segments[j].Key })
	a.cat = &c
	return a.cat, nil
}

// ReadSegment reads the segment of e and checks it (A3).
func (a *Archive) ReadSegment(ctx context.Context, e Entry) (Segment, error) {
	obj, err := a.read(ctx, e.Key)
	if err != nil {
		return Segment{}, err
	}
	sum := sha256.Sum256(obj)
	if hex.EncodeToString(sum[:]) != e.SHA256 {
		if raw, err := a.open(segmentDomain, obj, "segment "+e.Key); err == nil {
			var s Segment
			if json.Unmarshal(raw, &s) == nil && s.Key == e.Key {
				return Segment{}, fmt.Errorf("%w: segment %s: sha256 differs from the catalogue read", ErrStale, e.Key)
			}
		}
		return Segment{}, fmt.Errorf("%w: segment %s: sha256 differs from the catalogue", ErrBadSignature, e.Key)
	}
	raw, err := a.open(segmentDomain, obj, "segment "+e.Key)
	if err != nil {
		return Segment{}, err
	}
	var s Segment
	if err := json.Unmarshal(raw, &s); err != nil {
		return Segment{}, fmt.Errorf("%w: segment %s: %w", ErrCorrupt, e.Key, err)
	}
	if s.Version != Version || s.Key != e.Key || len(s.Hooks) != e.Count {
		return Segment{}, fmt.Errorf("%w: segment %s: version %d, key %q, %d hooks do not match its entry", ErrCorrupt, e.Key, s.Version, s.Key, len(s.Hooks))
	}
	return s, nil
}

func (a *Archive) read(ctx context.Context, key string) ([]byte, error) {
	r, err := a.o.Store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("archive: read: %w", err)
	}
	// A read side: the signature check, not Close, says whether the object
	// is whole.
	defer func() { _ = r.Close() }()
	b, err := io.ReadAll(io.LimitReader(r, maxObject+1))
	if err != nil {
		return nil, fmt.Errorf("archive: read %s: %w", key, err)
	}
	if len(b) > maxObject {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrCorrupt, key, maxObject)
	}
	return b, nil
}

func (a *Archive) open(domain string, obj []byte, what string) (json.RawMessage, error) {
	var s signed
	if err := json.Unmarshal(obj, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, what, err)
	}
	if err := backup.VerifySignature(domain, a.o.SigningKey, s.Payload, s.Signature); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSignature, what, err)
	}
	return s.Payload, nil
}
