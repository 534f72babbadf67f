package httpsink

import "time"

// SetNow fixes the sink's clock (the signature's timestamp).
func SetNow(s *Sink, now func() time.Time) { s.now = now }
