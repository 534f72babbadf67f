// Package hook holds the few value types every stage of a hook's way shares
// (the edge that captures it, the store that keeps it, the sinks that
// deliver it), so that none of them has to import another for a type: the
// sinks in particular link no storage engine for a header.
//
// It is a leaf: it imports nothing of Ankusa's and nothing outside the
// standard library.
package hook

// Header is one request header kept with a hook, as received: the name in
// lower case, the value byte for byte. The store encodes it (store.Header is
// this type) and the sinks read it from sink.Message without a copy.
type Header struct {
	Name, Value string
}
