package dispatch

// SetAfterOutcome installs the seam called after each outcome write; set it
// before Start.
func SetAfterOutcome(d *Dispatcher, f func()) { d.afterOutcome = f }
