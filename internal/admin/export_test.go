package admin

import "time"

// WrapProbeWrite lets a test observe or replace the probe write of r:
// wrap receives the real write and returns the one r will use.
func WrapProbeWrite(r *Readiness, wrap func(write func(now time.Time) error) func(now time.Time) error) {
	r.probeWrite = wrap(r.probeWrite)
}

// RouteRole is the role a route pattern needs ("read" or "operate"), and
// whether the table names it.
func RouteRole(pattern string) (string, bool) {
	if consoleOpenRoutes()[pattern] {
		return "open", true
	}
	r, ok := routeRoles()[pattern]
	if r == roleOperate {
		return "operate", ok
	}
	return "read", ok
}
