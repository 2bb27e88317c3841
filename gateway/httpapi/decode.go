package httpapi

import (
	"bytes"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/stampede-sh/stampede/auth"
)

// Every request body goes through decodeBody: a strict decoder for the flat
// JSON objects of Stampede's API (docs/spec.md §3). Compared with encoding/json it
//
//   - rejects unknown fields and duplicate fields, also ones that differ
//     only in case (encoding/json would silently merge them);
//   - decodes integers as int64 without float64: 1.0, 1e3, "1" and anything
//     outside int64 are errors, so ids above 2^53 keep every digit;
//   - rejects missing required fields, wrong types, invalid UTF-8, trailing
//     data after the object and bodies over the size limit;
//   - names the offending field in every message;
//   - allocates nothing but the strings it returns.
//
// A field value that is not of its field's kind is an error before anything
// else is looked at, so the decoder never has to skip nested values.

// kind is the JSON type a field accepts.
type kind uint8

const (
	kindInt    kind = iota + 1 // a JSON integer in int64 range
	kindString                 // a JSON string
	kindTime                   // a JSON string holding an RFC 3339 time
	kindBool                   // true or false
)

// field is one member of a body: its name, its kind, where to store it and
// whether it must be present.
type Field struct {
	name     string
	kind     kind
	optional bool
	i        *int64
	s        *string
	t        *time.Time
	b        *bool
	set      *bool // optional fields: true when present and not null
	null     *bool // nullable fields: true when present as null
}

// maxFields is the most fields one body may declare (the seen set is a uint32).
const maxFields = 32

// intField, stringField and timeField declare a required field stored in *p.
func IntField(name string, p *int64) Field      { return Field{name: name, kind: kindInt, i: p} }
func StringField(name string, p *string) Field  { return Field{name: name, kind: kindString, s: p} }
func TimeField(name string, p *time.Time) Field { return Field{name: name, kind: kindTime, t: p} }
func BoolField(name string, p *bool) Field      { return Field{name: name, kind: kindBool, b: p} }

// optional makes f optional: absent or null leaves its target and *set as
// they are; a value sets *set to true.
func Optional(f Field, set *bool) Field {
	f.optional, f.set = true, set
	return f
}

// nullable makes f optional and records an explicit null in *isNull (absent
// leaves it false): for fields where null means something (saleEnd: none).
func Nullable(f Field, set, isNull *bool) Field {
	f = Optional(f, set)
	f.null = isNull
	return f
}

// label is f.name for an error message. It is a copy so that, for escape
// analysis, messages do not leak the field table: the variables the fields
// point into can then live on the caller's stack.
func (f *Field) label() string { return strings.Clone(f.name) }

func (k kind) describe() string {
	return [...]string{"", "an integer", "a string", "an RFC 3339 time string", "true or false"}[k]
}

// fieldNames lists the fields for a message: "productId, quantity, requestId".
func fieldNames(fields []Field) string {
	names := make([]string, len(fields))
	for i := range fields {
		names[i] = fields[i].label()
	}
	return strings.Join(names, ", ")
}

// decodeBody decodes body, which must be one JSON object, into fields. It
// returns a 400 INVALID_ARGUMENT *apiError (413 PAYLOAD_TOO_LARGE for a body
// over maxBytes) or nil: the first problem found.
func DecodeBody(body []byte, maxBytes int, fields []Field) *APIError {
	return decodeFields(body, maxBytes, fields, nil)
}

// decodeBodyAll is decodeBody reporting every problem of the fields at once:
// an unknown, duplicate, missing or mistyped field is added to *errs (its
// value skipped) and decoding goes on. Only a body that is not a readable
// JSON object (or is over maxBytes) returns an error at once.
func DecodeBodyAll(body []byte, maxBytes int, fields []Field, errs *[]FieldError) *APIError {
	return decodeFields(body, maxBytes, fields, errs)
}

// decodeFields is decodeBody (all nil: stop at the first problem) and
// decodeBodyAll (all non-nil: collect the problems of fields into *all).
func decodeFields(body []byte, maxBytes int, fields []Field, all *[]FieldError) *APIError {
	if len(fields) > maxFields { // a programming error, caught by the tests
		return &APIError{Status: 500, Code: CodeInternal, Message: "internal error"}
	}
	if len(body) > maxBytes {
		return TooLarge(maxBytes)
	}
	d := decoder{b: body}
	d.skipSpace()
	if d.peek() != '{' {
		return InvalidArg("request body must be a JSON object with fields %s", fieldNames(fields))
	}
	d.pos++
	var seen uint32
	d.skipSpace()
	if d.peek() == '}' {
		d.pos++
	} else {
		var err *APIError
		if seen, err = d.members(fields, all); err != nil {
			return err
		}
	}
	d.skipSpace()
	if d.pos != len(d.b) {
		return InvalidArg("request body has unexpected data after the JSON object (offset %d)", d.pos)
	}
	return missingFields(fields, seen, all)
}

// members decodes the members of a non-empty object, the cursor after its
// '{', up to and past its '}'. seen has bit i set for each fields[i] set.
func (d *decoder) members(fields []Field, all *[]FieldError) (uint32, *APIError) {
	var seen uint32
	for {
		f, unknown, err := d.memberKey(fields, &seen, all)
		if err != nil {
			return seen, err
		}
		d.skipSpace()
		if d.peek() != ':' {
			return seen, d.syntax("expected ':' after field " + strconv.Quote(memberName(f, unknown)))
		}
		d.pos++
		d.skipSpace()
		if err := d.memberValue(f, unknown, all); err != nil {
			return seen, err
		}
		d.skipSpace()
		if c := d.peek(); c == ',' {
			d.pos++
			continue
		} else if c == '}' {
			d.pos++
			return seen, nil
		}
		return seen, d.syntax("expected ',' or '}' after field " + strconv.Quote(memberName(f, unknown)))
	}
}

// memberKey reads a member's name and marks its field in *seen: f is the
// field it sets, or nil with unknown, the member's name, when it is none of
// fields, one already set, or one that differs in case (a problem reported
// to all; the value is then skipped).
func (d *decoder) memberKey(fields []Field, seen *uint32, all *[]FieldError) (f *Field, unknown string, err *APIError) {
	d.skipSpace()
	if d.peek() != '"' {
		return nil, "", d.syntax("expected a field name")
	}
	keyAt := d.pos
	key, ok := d.str()
	if !ok {
		return nil, "", d.syntaxAt(keyAt, "malformed field name")
	}
	idx := lookup(fields, key)
	var bad *APIError // a problem of this member: its value is skipped
	switch {
	case idx < 0:
		bad = InvalidArg("unknown field %s", quoteField(key))
	case *seen&(1<<idx) != 0:
		bad = InvalidArg("duplicate field %s (field %q is already set)", quoteField(key), fields[idx].label())
	case string(key) != fields[idx].name:
		bad = InvalidArg("unknown field %s (field names are case-sensitive: did you mean %q?)", quoteField(key), fields[idx].label())
	default:
		*seen |= 1 << idx
		return &fields[idx], "", nil
	}
	unknown = string(key) // an error path
	return nil, unknown, report(all, unknown, bad)
}

// memberValue decodes a member's value into f, or skips it when f is nil
// (unknown names the member). With all non-nil a value of the wrong kind
// is reported there and skipped.
func (d *decoder) memberValue(f *Field, unknown string, all *[]FieldError) *APIError {
	valueAt := d.pos
	if f == nil {
		if !d.skipValue() {
			return d.syntaxAt(valueAt, "malformed value of field "+strconv.Quote(unknown))
		}
		return nil
	}
	err := d.value(f)
	if err == nil {
		return nil
	}
	if err.Status != fasthttp.StatusBadRequest || all == nil {
		return err
	}
	// A value of the wrong kind: note it, skip the value.
	d.pos = valueAt
	if !d.skipValue() {
		return d.syntaxAt(valueAt, "malformed value of field "+strconv.Quote(f.label()))
	}
	return report(all, f.label(), err)
}

// missingFields reports every required field of fields not in seen: with
// all nil the first as the answer.
func missingFields(fields []Field, seen uint32, all *[]FieldError) *APIError {
	for i := range fields {
		if !fields[i].optional && seen&(1<<i) == 0 {
			if err := report(all, fields[i].label(), InvalidArg("missing required field %q", fields[i].label())); err != nil {
				return err
			}
		}
	}
	return nil
}

// memberName is f's name for a message (a copy: see label), or unknown's
// when f is nil.
func memberName(f *Field, unknown string) string {
	if f != nil {
		return f.label()
	}
	return unknown
}

// report handles a problem e of field name: with all nil the answer (stop
// at the first problem), else noted in *all (nil: go on).
func report(all *[]FieldError, name string, e *APIError) *APIError {
	if all == nil {
		return e
	}
	*all = append(*all, FieldError{Field: name, Message: e.Message})
	return nil
}

// skipValue moves the cursor past one JSON value (a string, a number, a
// literal, or a nested array or object, balanced); false if it is not
// readable. Numbers and literals are taken up to the next delimiter
// without checking their spelling: the value is being discarded.
func (d *decoder) skipValue() bool {
	switch d.peek() {
	case 0:
		return false
	case '"':
		_, ok := d.str()
		return ok
	case '{', '[':
		depth := 0
		for d.pos < len(d.b) {
			switch d.b[d.pos] {
			case '"':
				if _, ok := d.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					d.pos++
					return true
				}
			}
			d.pos++
		}
		return false
	}
	start := d.pos
	for d.pos < len(d.b) {
		switch d.b[d.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return d.pos > start
		}
		d.pos++
	}
	return d.pos > start
}

// lookup finds the field whose name equals key ignoring case, or -1.
func lookup(fields []Field, key []byte) int {
	for i := range fields {
		if string(key) == fields[i].name {
			return i
		}
	}
	for i := range fields {
		if bytes.EqualFold(key, []byte(fields[i].name)) {
			return i
		}
	}
	return -1
}

// quoteField quotes a client-sent field name for a message, cut to 64 bytes.
func quoteField(key []byte) string {
	if len(key) > 64 {
		return strconv.Quote(string(key[:64])) + "…"
	}
	return strconv.Quote(string(key))
}

// decoder is a cursor over one body.
type decoder struct {
	b       []byte
	pos     int
	scratch []byte // unescaped strings
}

func (d *decoder) peek() byte {
	if d.pos < len(d.b) {
		return d.b[d.pos]
	}
	return 0
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.b) {
		switch d.b[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) syntax(what string) *APIError { return d.syntaxAt(d.pos, what) }

func (d *decoder) syntaxAt(at int, what string) *APIError {
	if at >= len(d.b) {
		return InvalidArg("request body is not valid JSON: %s, found end of body", what)
	}
	return InvalidArg("request body is not valid JSON at offset %d: %s", at, what)
}

// value decodes the value at the cursor into f.
func (d *decoder) value(f *Field) *APIError {
	c := d.peek()
	if c == 'n' && bytes.HasPrefix(d.b[d.pos:], []byte("null")) {
		if !f.optional {
			return InvalidArg("%s must be %s, not null", f.label(), f.kind.describe())
		}
		d.pos += 4
		if f.null != nil {
			*f.null = true
		}
		return nil
	}
	switch f.kind {
	case kindInt:
		if c != '-' && (c < '0' || c > '9') {
			return d.wrongType(f)
		}
		n, err := d.integer(f)
		if err != nil {
			return err
		}
		*f.i = n
	case kindBool:
		switch rest := d.b[d.pos:]; {
		case bytes.HasPrefix(rest, []byte("true")):
			*f.b, d.pos = true, d.pos+4
		case bytes.HasPrefix(rest, []byte("false")):
			*f.b, d.pos = false, d.pos+5
		default:
			return d.wrongType(f)
		}
	case kindString, kindTime:
		if c != '"' {
			return d.wrongType(f)
		}
		at := d.pos
		raw, ok := d.str()
		if !ok {
			return d.syntaxAt(at, "malformed string in field "+strconv.Quote(f.name))
		}
		if !utf8.Valid(raw) {
			return InvalidArg("%s is not valid UTF-8", f.label())
		}
		if f.kind == kindString {
			*f.s = string(raw)
			break
		}
		t, err := time.Parse(time.RFC3339, string(raw))
		if err != nil {
			return InvalidArg("%s must be an RFC 3339 time such as \"2026-01-02T15:04:05Z\"", f.label())
		}
		*f.t = t
	}
	if f.set != nil {
		*f.set = true
	}
	return nil
}

// wrongType reports the JSON type found where f's kind was expected.
func (d *decoder) wrongType(f *Field) *APIError {
	found := "malformed"
	switch c := d.peek(); {
	case c == '"':
		found = "a string"
	case c == '{':
		found = "an object"
	case c == '[':
		found = "an array"
	case c == 't' || c == 'f':
		found = "a boolean"
	case c == '-' || c >= '0' && c <= '9':
		found = "a number"
	case c == 0:
		found = "nothing"
	}
	return InvalidArg("%s must be %s, not %s", f.label(), f.kind.describe(), found)
}

// integer reads -?(0|[1-9][0-9]*) as an int64. A fraction or exponent makes
// it a non-integer even when its value is whole (1.0, 1e3).
func (d *decoder) integer(f *Field) (int64, *APIError) {
	neg := false
	if d.peek() == '-' {
		neg = true
		d.pos++
	}
	start := d.pos
	var u uint64
	overflow := false
	for d.pos < len(d.b) && d.b[d.pos] >= '0' && d.b[d.pos] <= '9' {
		digit := uint64(d.b[d.pos] - '0')
		if u > (1<<64-1-digit)/10 {
			overflow = true
		} else {
			u = u*10 + digit
		}
		d.pos++
	}
	digits := d.pos - start
	switch {
	case digits == 0:
		return 0, InvalidArg("%s must be an integer, not a malformed number", f.label())
	case digits > 1 && d.b[start] == '0':
		return 0, InvalidArg("%s must be an integer without leading zeros", f.label())
	}
	if c := d.peek(); c == '.' || c == 'e' || c == 'E' {
		return 0, InvalidArg("%s must be an integer, without a fraction or exponent", f.label())
	}
	if neg {
		if overflow || u > 1<<63 {
			return 0, InvalidArg("%s is out of range for a 64-bit integer", f.label())
		}
		return int64(-u), nil //nolint:gosec // u <= 1<<63: -u fits
	}
	if overflow || u > 1<<63-1 {
		return 0, InvalidArg("%s is out of range for a 64-bit integer", f.label())
	}
	return int64(u), nil
}

// str reads the JSON string at the cursor (which is at its opening quote)
// and returns its unescaped bytes: a slice of the body when it has no
// escapes, else of d.scratch. Either is valid only until the next call.
func (d *decoder) str() ([]byte, bool) {
	d.pos++ // opening quote
	start := d.pos
	for d.pos < len(d.b) {
		switch c := d.b[d.pos]; {
		case c == '"':
			d.pos++
			return d.b[start : d.pos-1], true
		case c == '\\':
			return d.strEscaped(start)
		case c < 0x20:
			return nil, false
		}
		d.pos++
	}
	return nil, false
}

// strEscaped continues str after the first backslash.
func (d *decoder) strEscaped(start int) ([]byte, bool) {
	out := append(d.scratch[:0], d.b[start:d.pos]...)
	defer func() { d.scratch = out[:0] }()
	for d.pos < len(d.b) {
		c := d.b[d.pos]
		switch {
		case c == '"':
			d.pos++
			return out, true
		case c < 0x20:
			return nil, false
		case c != '\\':
			out = append(out, c)
			d.pos++
			continue
		}
		d.pos++ // backslash
		if d.pos >= len(d.b) {
			return nil, false
		}
		e := d.b[d.pos]
		d.pos++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return nil, false
			}
			if utf16.IsSurrogate(r) {
				// A surrogate must be the first half of a pair.
				if d.pos+1 >= len(d.b) || d.b[d.pos] != '\\' || d.b[d.pos+1] != 'u' {
					return nil, false
				}
				d.pos += 2
				r2, ok := d.hex4()
				if !ok {
					return nil, false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return nil, false
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, false
		}
	}
	return nil, false
}

func (d *decoder) hex4() (rune, bool) {
	if d.pos+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.pos : d.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.pos += 4
	return r, true
}

// parseID parses an id in a path or query: a positive int64 in canonical
// decimal only ("7", never "+7", "007" or " 7"), so each id has one
// spelling (auth.ParseDecimalID).
func ParseID(s string) (int64, bool) { return auth.ParseDecimalID(s) }
