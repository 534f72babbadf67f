package config

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// interpolate expands ${VAR} and ${VAR:-default} in the raw file text and
// turns $$ into a literal $. A "$" followed by anything else is kept as is,
// so secrets containing a lone "$" survive without escaping.
//
// It works on the raw text (before YAML parsing) so a variable can stand for
// any part of the file; the price is that the value is inserted verbatim,
// which is why the docs ask for quotes around interpolated strings.
//
// Every problem in the file is reported at once, each with its line.
func interpolate(src []byte, getenv func(string) (string, bool)) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(src))
	var problems []string
	line := 1
	for i := 0; i < len(src); {
		c := src[i]
		if c != '$' {
			if c == '\n' {
				line++
			}
			out.WriteByte(c)
			i++
			continue
		}
		next := byte(0)
		if i+1 < len(src) {
			next = src[i+1]
		}
		switch next {
		case '$':
			out.WriteByte('$')
			i += 2
			continue
		case '{':
		default:
			out.WriteByte('$')
			i++
			continue
		}

		rest := src[i+2:]
		end := bytes.IndexAny(rest, "}\n")
		if end < 0 || rest[end] != '}' {
			problems = append(problems, fmt.Sprintf("line %d: unterminated ${ (write $$ for a literal $)", line))
			// Skip to the end of the line so one typo is reported once.
			if end < 0 {
				end = len(rest)
			}
			out.Write(src[i : i+2+end])
			i += 2 + end
			continue
		}
		expr := string(rest[:end])
		i += 2 + end + 1

		name, fallback, hasFallback := strings.Cut(expr, ":-")
		if !envNameRE.MatchString(name) {
			problems = append(problems, fmt.Sprintf("line %d: invalid variable name %q in ${%s}", line, name, expr))
			continue
		}
		val, ok := getenv(name)
		switch {
		case hasFallback && (!ok || val == ""):
			// Shell semantics: ":-" also covers a variable set to "".
			val = fallback
		case !ok:
			problems = append(problems, fmt.Sprintf("line %d: environment variable %s is not set (use ${%s:-default} to give a default)", line, name, name))
			continue
		}
		out.WriteString(val)
	}
	if len(problems) > 0 {
		return nil, errors.New("interpolate: " + strings.Join(problems, "; "))
	}
	return out.Bytes(), nil
}
