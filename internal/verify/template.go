package verify

import (
	"errors"
	"fmt"
	"net/textproto"
	"strings"
)

// partKind is one piece of a compiled Signed template.
type partKind uint8

const (
	partLiteral partKind = iota
	partBody
	partTS
	partHeader
)

// part is one piece of the signed bytes, written to the MAC in order.
type part struct {
	kind partKind
	lit  []byte // partLiteral: the bytes
	idx  int    // partHeader: index into engine.headers
}

// compileTemplate parses a Signed template into parts. It returns the
// canonical names of the headers it references (each once, in order of first
// use) and whether it uses {ts}. {body} must appear exactly once: a
// signature that does not cover the body authenticates nothing we store.
func compileTemplate(t string) (parts []part, headers []string, usesTS bool, err error) {
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, part{kind: partLiteral, lit: []byte(lit.String())})
			lit.Reset()
		}
	}
	bodies := 0
	for i := 0; i < len(t); {
		if t[i] != '{' {
			lit.WriteByte(t[i])
			i++
			continue
		}
		end := strings.IndexByte(t[i:], '}')
		if end < 0 {
			return nil, nil, false, errors.New(`has a "{" without a closing "}"`)
		}
		tok := t[i+1 : i+end]
		i += end + 1
		flush()
		switch {
		case tok == "body":
			bodies++
			parts = append(parts, part{kind: partBody})
		case tok == "ts":
			usesTS = true
			parts = append(parts, part{kind: partTS})
		case strings.HasPrefix(tok, "header:"):
			name := tok[len("header:"):]
			if !validHeaderName(name) {
				return nil, nil, false, fmt.Errorf("placeholder {%s}: %q is not a header name", tok, name)
			}
			name = textproto.CanonicalMIMEHeaderKey(name)
			idx := -1
			for j, h := range headers {
				if h == name {
					idx = j
				}
			}
			if idx < 0 {
				if len(headers) == maxTemplateHeaders {
					return nil, nil, false, fmt.Errorf("references more than %d headers", maxTemplateHeaders)
				}
				idx = len(headers)
				headers = append(headers, name)
			}
			parts = append(parts, part{kind: partHeader, idx: idx})
		default:
			return nil, nil, false, fmt.Errorf("unknown placeholder {%s} (want {body}, {ts} or {header:NAME})", tok)
		}
	}
	flush()
	if bodies != 1 {
		return nil, nil, false, fmt.Errorf("must contain {body} exactly once, found %d", bodies)
	}
	return parts, headers, usesTS, nil
}
