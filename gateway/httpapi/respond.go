package httpapi

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
)

const ContentTypeJSON = "application/json"

// writeBody sends b (copied) as a JSON response with status.
func WriteBody(ctx *fasthttp.RequestCtx, status int, b []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(ContentTypeJSON)
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.Response.SetBody(b)
}

// JSON encodes v with encoding/json; for answers off the hot path.
func (s *Answers) JSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own types are encoded: a bug
		s.Log.Error("encode response", "path", string(ctx.Path()), "err", err)
		WriteError(ctx, fasthttp.StatusInternalServerError, CodeInternal, "internal error")
		return
	}
	WriteBody(ctx, status, b)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// control characters are escaped, and so are <, > and & (as encoding/json
// does) so a message can never be read as markup.
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
