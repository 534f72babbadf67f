package dispatch

// SetAfterOutcome installs the seam called after each outcome write; set it
// before Start.
func SetAfterOutcome(d *Dispatcher, f func()) { d.afterOutcome = f }

// SetAfterArchive installs the seam called after a segment was written and
// before its hooks' rows are removed; set it before Start.
func SetAfterArchive(d *Dispatcher, f func() error) { d.afterArchive = f }

// SetBeforeArchiveSync installs the seam called after an archive pass read
// its hooks and before its WAL sync (invariant 3); set it before Start.
func SetBeforeArchiveSync(d *Dispatcher, f func()) { d.beforeArchiveSync = f }
