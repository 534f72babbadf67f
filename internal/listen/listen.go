// Package listen runs one HTTP listener with a connection cap (per listener
// and per client IP), a connection table that evicts quiet connections when
// the cap is reached, and a bounded drain for shutdown.
//
// Invariants:
//
//  1. At most MaxConns accepted connections are open at once (and at most
//     MaxConnsPerIP from one IP): a connection past the cap is answered a
//     canned 503 and closed before any goroutine or buffer is spent on it,
//     after the oldest quiet connection (no request in progress) was
//     evicted to make room, if there was one. "No request in progress" is
//     what net/http reports: a connection whose request bytes are in its
//     socket but not yet read is still quiet (StateNew) and can be the one
//     evicted; its client sees the connection close with no answer and
//     nothing was acked, so it retries. Counting unread bytes instead
//     would make a slowloris's half-sent headers unevictable. The other
//     way round, a connection the server is closing after a
//     "Connection: close" answer still counts as active until net/http
//     reports it closed (moments; under load a new connection can be
//     refused in that window).
//  2. Under pressure (open ≥ 90% of MaxConns) and while draining, every
//     answer carries "Connection: close": the client learns from the answer
//     itself that the connection ends, so a keep-alive client never sends
//     a request into a connection the server is about to close.
//  3. Drain stops accepting at once, lets every request already read get
//     its answer, closes a quiet connection only after it stayed quiet for
//     quietGrace since the drain began, and gives up at the context's
//     deadline (closing what is left, and saying so in its error).
package listen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Server.
type Options struct {
	// Name labels logs and errors ("ingest", "admin").
	Name    string
	Handler http.Handler
	// MaxConns caps the open connections; required (> 0).
	MaxConns int
	// MaxConnsPerIP caps one client IP's open connections; 0 means no cap.
	MaxConnsPerIP int

	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                              int

	// TLS, when set, serves HTTPS: each admitted connection is wrapped in
	// tls.Server, so the connection table and net/http see the same conn.
	// A connection refused at the cap gets the plain 503 anyway (a TLS
	// client sees a failed handshake; the point is to close it cheaply).
	TLS *tls.Config

	Logger *slog.Logger
	// OnRefused is told each connection refused at the cap ("max_conns" or
	// "max_conns_per_ip"); a metric belongs here.
	OnRefused func(reason string)
}

// quietGrace: during a drain, a connection with no request in progress is
// closed once it has been quiet this long. A keep-alive client that got
// its last answer before the drain began may be about to send its next
// request; it gets this long to do so, and that request is answered.
const quietGrace = 300 * time.Millisecond

// drainPoll is how often a drain looks for quiet connections to close.
const drainPoll = 20 * time.Millisecond

// Server is one listener. Serve runs it; Drain stops it.
type Server struct {
	o        Options
	log      *slog.Logger
	srv      *http.Server
	ln       net.Listener
	open     atomic.Int64
	draining atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]*connInfo // guarded by mu
	perIP map[string]int         // guarded by mu
	seq   uint64                 // guarded by mu; accept order
}

type connInfo struct {
	ip    string
	state http.ConnState
	since time.Time // last state change
	order uint64
}

// New builds a server on ln; nothing is accepted before Serve.
func New(ln net.Listener, o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OnRefused == nil {
		o.OnRefused = func(string) {}
	}
	s := &Server{o: o, log: o.Logger.With("component", "listen", "listener", o.Name),
		conns: map[net.Conn]*connInfo{}, perIP: map[string]int{}}
	s.ln = &capListener{Listener: ln, s: s}
	s.srv = &http.Server{
		Handler:           s.wrap(o.Handler),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ConnState:         s.connState,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	return s
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Open is the number of open connections.
func (s *Server) Open() int { return int(s.open.Load()) }

// Serve accepts until Drain or Close; it returns nil when stopped by them.
func (s *Server) Serve() error {
	err := s.srv.Serve(s.ln)
	if s.draining.Load() || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops at once, cutting every connection.
func (s *Server) Close() error {
	s.draining.Store(true)
	return s.srv.Close()
}

// Drain is invariant 3. It returns nil when every connection ended by
// itself or quietly, an error naming the connections it cut otherwise.
func (s *Server) Drain(ctx context.Context) error {
	s.draining.Store(true)
	_ = s.ln.Close()
	start := time.Now()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		s.closeQuiet(start)
		if s.Open() == 0 {
			// Nothing is left: Shutdown only reaps Serve's bookkeeping (its
			// listener is already closed, which is not an error here).
			if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
				return err
			}
			return nil
		}
		select {
		case <-ctx.Done():
			n := s.Open()
			_ = s.srv.Close()
			return fmt.Errorf("%s listener: drain cut %d connection(s) still in a request: %w", s.o.Name, n, ctx.Err())
		case <-tick.C:
		}
	}
}

// closeQuiet closes the connections with no request in progress that have
// been quiet for quietGrace since the later of drainStart and their last
// state change.
func (s *Server) closeQuiet(drainStart time.Time) {
	now := time.Now()
	s.mu.Lock()
	var victims []net.Conn
	for c, ci := range s.conns {
		if ci.state != http.StateIdle && ci.state != http.StateNew {
			continue
		}
		from := ci.since
		if drainStart.After(from) {
			from = drainStart
		}
		if now.Sub(from) >= quietGrace {
			victims = append(victims, c)
			s.forgetLocked(c, ci)
		}
	}
	s.mu.Unlock()
	for _, c := range victims {
		_ = c.Close()
	}
}

// wrap is invariant 2.
func (s *Server) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() || s.underPressure() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) underPressure() bool {
	return s.open.Load()*10 >= int64(s.o.MaxConns)*9
}

// admit registers c, or says why it is refused (invariant 1).
func (s *Server) admit(c net.Conn) string {
	ip := remoteIP(c)
	var victim net.Conn
	s.mu.Lock()
	if s.o.MaxConnsPerIP > 0 && s.perIP[ip] >= s.o.MaxConnsPerIP {
		s.mu.Unlock()
		return "max_conns_per_ip"
	}
	if len(s.conns) >= s.o.MaxConns {
		victim = s.oldestQuietLocked()
		if victim == nil {
			s.mu.Unlock()
			return "max_conns"
		}
		s.forgetLocked(victim, s.conns[victim])
	}
	s.seq++
	s.conns[c] = &connInfo{ip: ip, state: http.StateNew, since: time.Now(), order: s.seq}
	s.perIP[ip]++
	s.open.Add(1)
	s.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
	}
	return ""
}

// oldestQuietLocked is the longest-open connection with no request in
// progress, or nil. A linear scan: it runs only at the cap, and the cap
// bounds the table.
func (s *Server) oldestQuietLocked() net.Conn {
	var best net.Conn
	var bestOrder uint64
	for c, ci := range s.conns {
		if ci.state != http.StateIdle && ci.state != http.StateNew {
			continue
		}
		if best == nil || ci.order < bestOrder {
			best, bestOrder = c, ci.order
		}
	}
	return best
}

// forgetLocked removes c from the table. REQUIRES: s.mu held, ci == s.conns[c].
func (s *Server) forgetLocked(c net.Conn, ci *connInfo) {
	if ci == nil {
		return
	}
	delete(s.conns, c)
	if s.perIP[ci.ip]--; s.perIP[ci.ip] <= 0 {
		delete(s.perIP, ci.ip)
	}
	s.open.Add(-1)
}

func (s *Server) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ci := s.conns[c]
	if ci == nil {
		return // evicted or closed by a drain: already forgotten
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		s.forgetLocked(c, ci)
	default:
		ci.state, ci.since = st, time.Now()
	}
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// refusedBody is the canned answer of a connection past the cap.
func refusedAnswer(reason string) []byte {
	body := `{"error":"overload","reason":"` + reason + `"}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// capListener applies admit to every accepted connection.
type capListener struct {
	net.Listener
	s *Server
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := raw
		if l.s.o.TLS != nil {
			c = tls.Server(raw, l.s.o.TLS) // net/http runs the handshake
		}
		reason := l.s.admit(c)
		if reason == "" {
			return c, nil
		}
		c = raw
		l.s.o.OnRefused(reason)
		// Best effort and never blocking the accept loop: the answer fits
		// the socket's send buffer.
		_ = c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		_, _ = c.Write(refusedAnswer(reason))
		_ = c.Close()
	}
}
