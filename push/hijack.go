package push

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
)

// Buffer sizes of an accepted socket. net/http hands a hijacked connection
// over with its 4 KiB read and 4 KiB write buffers, and coder/websocket keeps
// both for the socket's life: 8 KiB of a waiting socket's memory for
// messages of a few hundred bytes. leanHijacker gives it these instead.
// A message larger than a buffer still goes through, in more system calls.
const (
	// readBufferSize holds a client message ({"type":"subscribe",…},
	// about 60 bytes) and its frame header.
	readBufferSize = 256
	// writeBufferSize holds a server message (an order message with a
	// pay deadline is about 200 bytes) and its frame header, so that each
	// goes out in one write.
	writeBufferSize = 512
)

// leanHijacker is the http.ResponseWriter websocket.Accept gets: its Hijack
// returns the connection with buffers of readBufferSize and writeBufferSize
// and lets net/http's own go.
type leanHijacker struct{ http.ResponseWriter }

// Unwrap is for http.ResponseController.
func (w leanHijacker) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hijacks the underlying connection. Bytes the client sent before
// the handshake's answer and that net/http already read are kept in front
// of the connection (prefixConn).
func (w leanHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if brw.Writer.Buffered() > 0 { // net/http flushes the 101 before it hands over; be sure
		if err := brw.Writer.Flush(); err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	rwc := nc
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		rwc = &prefixConn{Conn: nc, r: io.MultiReader(bytes.NewReader(bytes.Clone(b)), nc)}
	}
	return rwc, bufio.NewReadWriter(bufio.NewReaderSize(rwc, readBufferSize), bufio.NewWriterSize(rwc, writeBufferSize)), nil
}

// prefixConn is a connection whose first bytes were already read from it.
type prefixConn struct {
	net.Conn
	r io.Reader // the bytes read already, then the connection
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }
