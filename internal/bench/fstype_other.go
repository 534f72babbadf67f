//go:build !linux

package bench

// fsType is only known on Linux.
func fsType(string) string { return "" }
