package natssink

// CloseConnForTest closes the sink's connection the way the client library
// does when the server ends the session with a fatal error, without
// closing the sink.
func CloseConnForTest(s *Sink) {
	if c := s.current(); c != nil {
		c.nc.Close()
	}
}
