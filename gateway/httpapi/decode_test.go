package httpapi

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// orderBody decodes body with the order request's fields.
func orderBody(body string) (pid, qty int64, rid string, err *APIError) {
	fields := [...]Field{IntField("productId", &pid), IntField("quantity", &qty), StringField("requestId", &rid)}
	err = DecodeBody([]byte(body), testMaxBodyBytes, fields[:])
	return pid, qty, rid, err
}

func TestDecodeBodyAccepts(t *testing.T) {
	for _, tc := range []struct {
		body string
		pid  int64
		qty  int64
		rid  string
	}{
		{`{"productId":7,"quantity":1,"requestId":"b2f1"}`, 7, 1, "b2f1"},
		{" \r\n\t{ \"requestId\" : \"x\" ,\n\"quantity\":0, \"productId\" : -3 } \n", -3, 0, "x"},
		{`{"productId":9223372036854775807,"quantity":-9223372036854775808,"requestId":""}`, math.MaxInt64, math.MinInt64, ""},
		{`{"productId":1,"quantity":2,"requestId":"a\"b\\c\/d\n\u00e9\ud83d\ude00"}`, 1, 2, "a\"b\\c/d\né😀"},
		{`{"\u0070roductId":1,"quantity":2,"requestId":"r"}`, 1, 2, "r"}, // escaped key
	} {
		pid, qty, rid, err := orderBody(tc.body)
		if err != nil || pid != tc.pid || qty != tc.qty || rid != tc.rid {
			t.Errorf("%s: got %d %d %q %v", tc.body, pid, qty, rid, err)
		}
	}
}

func TestDecodeBodyRejects(t *testing.T) {
	for _, tc := range []struct {
		body string
		want string // in the message
	}{
		{``, "productId"},
		{`   `, "JSON object"},
		{`[]`, "JSON object"},
		{`null`, "JSON object"},
		{`{}`, `"productId"`},
		{`{"productId":1,"quantity":1}`, `missing required field "requestId"`},
		{`{"productId":1,"quantity":1,"requestId":"a","x":1}`, `unknown field "x"`},
		{`{"productId":1,"productId":2,"quantity":1,"requestId":"a"}`, `duplicate field "productId"`},
		{`{"quantity":1,"Quantity":2,"productId":1,"requestId":"a"}`, `duplicate field "Quantity"`},
		{`{"Quantity":2,"productId":1,"requestId":"a"}`, `unknown field "Quantity"`},
		{`{"productId":1,"quantity":1.5,"requestId":"a"}`, "quantity must be an integer"},
		{`{"productId":1,"quantity":1.0,"requestId":"a"}`, "quantity must be an integer"},
		{`{"productId":1,"quantity":1e2,"requestId":"a"}`, "quantity must be an integer"},
		{`{"productId":1,"quantity":1E2,"requestId":"a"}`, "quantity must be an integer"},
		{`{"productId":1,"quantity":"7","requestId":"a"}`, "quantity must be an integer, not a string"},
		{`{"productId":1,"quantity":true,"requestId":"a"}`, "quantity must be an integer, not a boolean"},
		{`{"productId":1,"quantity":null,"requestId":"a"}`, "quantity must be an integer, not null"},
		{`{"productId":1,"quantity":[1],"requestId":"a"}`, "quantity must be an integer, not an array"},
		{`{"productId":1,"quantity":{},"requestId":"a"}`, "quantity must be an integer, not an object"},
		{`{"productId":1,"quantity":01,"requestId":"a"}`, "quantity must be an integer without leading zeros"},
		{`{"productId":1,"quantity":-,"requestId":"a"}`, "quantity must be an integer"},
		{`{"productId":9223372036854775808,"quantity":1,"requestId":"a"}`, "productId is out of range"},
		{`{"productId":-9223372036854775809,"quantity":1,"requestId":"a"}`, "productId is out of range"},
		{`{"productId":99999999999999999999999,"quantity":1,"requestId":"a"}`, "productId is out of range"},
		{`{"productId":1,"quantity":1,"requestId":7}`, "requestId must be a string"},
		{`{"productId":1,"quantity":1,"requestId":"a` + "\x01" + `"}`, "requestId"},
		{`{"productId":1,"quantity":1,"requestId":"\x"}`, "requestId"},
		{`{"productId":1,"quantity":1,"requestId":"\ud800"}`, "requestId"},
		{`{"productId":1,"quantity":1,"requestId":"` + "\xff" + `"}`, "requestId is not valid UTF-8"},
		{`{"productId":1,"quantity":1,"requestId":"a"}x`, "unexpected data after the JSON object"},
		{`{"productId":1,"quantity":1,"requestId":"a"}{}`, "unexpected data after the JSON object"},
		{`{"productId":1,"quantity":1,"requestId":"a"`, "end of body"},
		{`{"productId":1 "quantity":1}`, `after field "productId"`},
		{`{"productId" 1}`, `after field "productId"`},
		{`{"productId":1,}`, "field name"},
		{`{productId:1}`, "field name"},
	} {
		_, _, _, err := orderBody(tc.body)
		if err == nil {
			t.Errorf("%.80q: accepted", tc.body)
			continue
		}
		if err.Status != 400 || err.Code != CodeInvalidArgument || !strings.Contains(err.Message, tc.want) {
			t.Errorf("%.80q: got %d %s %q, want message containing %q", tc.body, err.Status, err.Code, err.Message, tc.want)
		}
	}
}

func TestDecodeBodyTooLarge(t *testing.T) {
	long := `{"productId":1,"quantity":1,"requestId":"` + strings.Repeat("a", testMaxBodyBytes) + `"}`
	_, _, _, err := orderBody(long)
	if err == nil || err.Status != 413 || err.Code != CodePayloadTooLarge || !strings.Contains(err.Message, "exceeds 4096 bytes") {
		t.Fatalf("oversized body: %v", err)
	}
}

// decodeBodyAll names every problem of a body, each with its field, and
// still decodes the good fields.
func TestDecodeBodyAll(t *testing.T) {
	var (
		n, m            int64
		s               string
		at              time.Time
		hasAt, atIsNull bool
	)
	fields := func() []Field {
		n, m, s, at, hasAt, atIsNull = 0, 0, "", time.Time{}, false, false
		return []Field{IntField("n", &n), IntField("m", &m), StringField("s", &s), Nullable(TimeField("at", &at), &hasAt, &atIsNull)}
	}
	var errs []FieldError
	body := `{"n":1.5,"x":{"a":[1,"}"]},"s":"ok","N":2,"at":"soon"}`
	if err := DecodeBodyAll([]byte(body), 4096, fields(), &errs); err != nil {
		t.Fatalf("fatal %v", err)
	}
	want := []string{"n", "x", "N", "at", "m"}
	if len(errs) != len(want) {
		t.Fatalf("errors %+v, want fields %v", errs, want)
	}
	for i, e := range errs {
		if e.Field != want[i] || e.Message == "" {
			t.Fatalf("error %d %+v, want field %s", i, e, want[i])
		}
	}
	if s != "ok" {
		t.Fatalf("good field not decoded: %q", s)
	}
	// null of a nullable field is told apart from absent.
	errs = nil
	if err := DecodeBodyAll([]byte(`{"n":1,"m":2,"s":"","at":null}`), 4096, fields(), &errs); err != nil || len(errs) != 0 || !atIsNull || hasAt {
		t.Fatalf("null: %v %+v null %v set %v", err, errs, atIsNull, hasAt)
	}
	errs = nil
	if err := DecodeBodyAll([]byte(`{"n":1,"m":2,"s":""}`), 4096, fields(), &errs); err != nil || len(errs) != 0 || atIsNull || hasAt {
		t.Fatalf("absent: %v %+v null %v set %v", err, errs, atIsNull, hasAt)
	}
	// A body that is not readable JSON is one error, at once.
	for _, bad := range []string{`{"n":1,`, `{"n":[1,2}`, `[1]`, `{"n" 1}`} {
		errs = nil
		if err := DecodeBodyAll([]byte(bad), 4096, fields(), &errs); err == nil || err.Status != 400 {
			t.Errorf("%s: %v %+v", bad, err, errs)
		}
	}
}

func TestDecodeBodyOptionalAndTime(t *testing.T) {
	var (
		n      int64
		at     time.Time
		has    bool
		fields = func() []Field {
			return []Field{TimeField("at", &at), Optional(IntField("n", &n), &has)}
		}
	)
	if err := DecodeBody([]byte(`{"at":"2026-01-02T03:04:05.678+01:00"}`), 4096, fields()); err != nil || has {
		t.Fatalf("optional absent: %v %v", err, has)
	}
	if !at.Equal(time.Date(2026, 1, 2, 2, 4, 5, 678e6, time.UTC)) {
		t.Fatalf("time %v", at)
	}
	if err := DecodeBody([]byte(`{"at":"2026-01-02T03:04:05Z","n":null}`), 4096, fields()); err != nil || has {
		t.Fatalf("optional null: %v %v", err, has)
	}
	if err := DecodeBody([]byte(`{"at":"2026-01-02T03:04:05Z","n":3}`), 4096, fields()); err != nil || !has || n != 3 {
		t.Fatalf("optional set: %v %v %d", err, has, n)
	}
	for _, bad := range []string{`{"at":"2026-01-02"}`, `{"at":"yesterday"}`, `{"at":1}`} {
		if err := DecodeBody([]byte(bad), 4096, fields()); err == nil || !strings.Contains(err.Message, "at must be") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// The order body costs one allocation: the requestId string.
func TestDecodeBodyAllocations(t *testing.T) {
	body := []byte(`{"productId":7,"quantity":1,"requestId":"b2f1-aaaa"}`)
	allocs := testing.AllocsPerRun(200, func() {
		var pid, qty int64
		var rid string
		fields := [...]Field{IntField("productId", &pid), IntField("quantity", &qty), StringField("requestId", &rid)}
		if err := DecodeBody(body, testMaxBodyBytes, fields[:]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("%v allocations per decode, want <= 1", allocs)
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "ctl\x00\x1f\n\r\t", "<a>&", "é😀", "bad\xffutf8", "\u2028"} {
		b := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Errorf("%q → %s: %v", s, b, err)
			continue
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if back != want {
			t.Errorf("%q → %s → %q", s, b, back)
		}
	}
}

// FuzzDecodeBody checks the strict decoder against encoding/json: whatever
// decodeBody accepts is valid JSON that encoding/json decodes to the same
// values, and every rejection is a 400 that names something.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []string{
		`{"productId":7,"quantity":1,"requestId":"b2f1"}`,
		`{"productId":-0,"quantity":9223372036854775807,"requestId":"\u00e9\ud83d\ude00\n"}`,
		`{"productId":1.0}`, `{"a":1}`, `{"productId":1,"productId":1}`, ` { } `, `{"requestId":"\/"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var pid, qty int64
		var rid string
		fields := [...]Field{IntField("productId", &pid), IntField("quantity", &qty), StringField("requestId", &rid)}
		err := DecodeBody(body, testMaxBodyBytes, fields[:])
		if err != nil {
			if err.Status != 400 || err.Code != CodeInvalidArgument || err.Message == "" {
				t.Fatalf("%q: %+v", body, err)
			}
			return
		}
		var std struct {
			ProductID *int64  `json:"productId"`
			Quantity  *int64  `json:"quantity"`
			RequestID *string `json:"requestId"`
		}
		d := json.NewDecoder(strings.NewReader(string(body)))
		d.DisallowUnknownFields()
		if err := d.Decode(&std); err != nil {
			t.Fatalf("%q accepted, encoding/json: %v", body, err)
		}
		if d.More() {
			t.Fatalf("%q accepted with trailing data", body)
		}
		if std.ProductID == nil || *std.ProductID != pid || std.Quantity == nil || *std.Quantity != qty ||
			std.RequestID == nil || *std.RequestID != rid {
			t.Fatalf("%q: DecodeBody %d %d %q, encoding/json %+v", body, pid, qty, rid, std)
		}
	})
}

// FuzzDecodeBodyAll: the collecting decoder never panics and agrees with
// decodeBody: a body decodeBody accepts gives no problem and the same
// values; a body it refuses gives at least one problem (or the same fatal
// error).
func FuzzDecodeBodyAll(f *testing.F) {
	for _, seed := range []string{
		`{"n":1,"s":"a","at":"2026-01-02T03:04:05Z"}`, `{"n":1.5,"x":{"a":[1,"}"]},"s":"ok","N":2,"at":"soon"}`,
		`{"n":1,"s":"a","at":null}`, `{"x":[[[[`, `{"n":"\u0031"}`, `{}`, `[]`, `{"s":"a\"b","n":-0}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		type vals struct {
			n, m  int64
			s     string
			at    time.Time
			isNil bool
		}
		decode := func(all *[]FieldError) (vals, *APIError) {
			var v vals
			var set bool
			fields := []Field{IntField("n", &v.n), Optional(IntField("m", &v.m), nil), StringField("s", &v.s),
				Nullable(TimeField("at", &v.at), &set, &v.isNil)}
			if all == nil {
				return v, DecodeBody(body, 4096, fields)
			}
			return v, DecodeBodyAll(body, 4096, fields, all)
		}
		one, err1 := decode(nil)
		var errs []FieldError
		every, errAll := decode(&errs)
		switch {
		case err1 == nil && (errAll != nil || len(errs) > 0):
			t.Fatalf("DecodeBody accepts %q, DecodeBodyAll finds %v %+v", body, errAll, errs)
		case err1 == nil && (one.n != every.n || one.m != every.m || one.s != every.s || !one.at.Equal(every.at) || one.isNil != every.isNil):
			t.Fatalf("%q: values differ %+v vs %+v", body, one, every)
		case err1 != nil && errAll == nil && len(errs) == 0:
			t.Fatalf("DecodeBody refuses %q (%v), DecodeBodyAll finds nothing", body, err1)
		}
		for _, e := range errs {
			if e.Message == "" { // Field may be "": a member named ""
				t.Fatalf("%q: empty problem %+v", body, e)
			}
		}
	})
}

// testMaxBodyBytes is the gateway's default body limit (Config.MaxBodyBytes).
const testMaxBodyBytes = 4096
