package loadgen

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultTable is the deliveries table of consume and verify.
const DefaultTable = "loadgen_deliveries"

var tableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidTable refuses a table name that would need quoting: it is spliced
// into SQL text (identifiers cannot be bound as parameters).
func ValidTable(name string) error {
	if !tableRE.MatchString(name) {
		return fmt.Errorf("loadgen: table %q must match %s", name, tableRE)
	}
	return nil
}

// Consumer is an HTTP sink target: every delivery becomes one row (id,
// idempotency key, sha256 of the body, received_at). It answers 200 only
// once the row is committed, and 503 when Postgres fails, so Ankusa
// retries rather than the drill losing a delivery it did receive.
type Consumer struct {
	pool  *pgxpool.Pool
	table string
	log   *slog.Logger
	// MaxBody bounds a delivery's body.
	maxBody int64
}

// ConsumerOptions configure NewConsumer.
type ConsumerOptions struct {
	Postgres string // a pgx connection URL
	Table    string // [loadgen_deliveries]
	Logger   *slog.Logger
}

// NewConsumer connects and creates the table if it does not exist.
func NewConsumer(ctx context.Context, o ConsumerOptions) (*Consumer, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := ValidTable(o.Table); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	pool, err := pgxpool.New(ctx, o.Postgres)
	if err != nil {
		return nil, fmt.Errorf("loadgen: postgres: %w", err)
	}
	c := &Consumer{pool: pool, table: o.Table, log: o.Logger.With("component", "loadgen-consume"), maxBody: 16 << 20}
	if err := CreateTable(ctx, pool, o.Table); err != nil {
		pool.Close()
		return nil, err
	}
	return c, nil
}

// CreateTable makes the deliveries table (idempotent).
func CreateTable(ctx context.Context, db *pgxpool.Pool, table string) error {
	if err := ValidTable(table); err != nil {
		return err
	}
	// No unique constraint on id: a redelivery is a row of its own, which
	// is how verify counts extra_deliveries.
	_, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		n bigserial PRIMARY KEY,
		id text NOT NULL,
		idempotency_key text NOT NULL,
		sha256 text NOT NULL,
		received_at timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		return fmt.Errorf("loadgen: create table %s: %w", table, err)
	}
	return nil
}

// Close releases the pool.
func (c *Consumer) Close() { c.pool.Close() }

func (c *Consumer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	id := r.Header.Get("X-Ankusa-Id")
	if id == "" {
		// Permanent for the sender: not a delivery from Ankusa.
		http.Error(w, "missing x-ankusa-id", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.maxBody))
	if err != nil {
		http.Error(w, "body read failed", http.StatusServiceUnavailable)
		return
	}
	sum := sha256.Sum256(body)
	_, err = c.pool.Exec(r.Context(),
		`INSERT INTO `+c.table+` (id, idempotency_key, sha256, received_at) VALUES ($1, $2, $3, $4)`,
		id, r.Header.Get("X-Ankusa-Idempotency-Key"), hex.EncodeToString(sum[:]), time.Now())
	if err != nil {
		c.log.Warn("insert failed", "err", err)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "store failed", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// Delivery is one row of the table.
type Delivery struct {
	ID, IdempotencyKey, SHA256 string
	ReceivedAt                 time.Time
}

// Deliveries reads every row of table.
func Deliveries(ctx context.Context, db *pgxpool.Pool, table string) ([]Delivery, error) {
	if err := ValidTable(table); err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT id, idempotency_key, sha256, received_at FROM `+table+` ORDER BY n`)
	if err != nil {
		return nil, fmt.Errorf("loadgen: read %s: %w", table, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		err := r.Scan(&d.ID, &d.IdempotencyKey, &d.SHA256, &d.ReceivedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("loadgen: read %s: %w", table, err)
	}
	return out, nil
}
