//go:build !linux

package bench

import "os"

// syncData is fsync where fdatasync is not at hand.
func syncData(f *os.File) error { return f.Sync() }
