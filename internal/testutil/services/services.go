// Package services gives tests the loopback Postgres and Redis with a unique
// name per test (a table, a key prefix), removed when the test ends. It is
// separate from testutil so that only the tests that use these services
// link their clients.
package services

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// PostgresURL is the suite's Postgres ($ANKUSA_TEST_POSTGRES, else the
// loopback server with trust auth, db test).
func PostgresURL() string {
	if u := os.Getenv("ANKUSA_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// RedisURL is the suite's Redis ($ANKUSA_TEST_REDIS, else the loopback one).
func RedisURL() string {
	if u := os.Getenv("ANKUSA_TEST_REDIS"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Unique is a short random suffix: lower-case hex, safe in a table name.
func Unique() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// PGTable returns a pool and a table name no other test uses; the table
// (if the test created it) is dropped at the end.
func PGTable(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, PostgresURL())
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("postgres at %s: %v", PostgresURL(), err)
	}
	name := "t_" + strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name += "_" + Unique()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+name)
		pool.Close()
	})
	return pool, name
}

// RedisPrefix returns a client and a key prefix no other test uses; every
// key under the prefix is deleted at the end.
func RedisPrefix(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("redis url: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s: %v", RedisURL(), err)
	}
	prefix := "ankusa-test-" + Unique()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			_ = c.Del(ctx, iter.Val()).Err()
		}
		_ = c.Close()
	})
	return c, prefix
}
