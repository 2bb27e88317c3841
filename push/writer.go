package push

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/coder/websocket"
)

// Writing to a socket. A socket has no writer goroutine while it has nothing
// to send: offerLocked queues a message and starts one if none runs
// (startWriterLocked); it sends what is queued, one message at a time, and
// ends once the queue is empty. Pings (pingTimer) and the close frame after
// kill take the same way, so a socket has at most one writer and an idle one
// costs only its reader goroutine (conn.run) — in a waiting room of 100,000
// sockets that is the difference between 100,000 and 200,000 parked
// goroutines and their stacks.
//
// A ping goes to a socket that was sent nothing for PingInterval. One that
// gets messages (a waiting room's line moves every 250 ms) needs none: the
// messages keep proxies from timing it out, and a peer that is gone or stops
// reading fills the kernel's send buffer until a write misses WriteTimeout.
// On a sale's line that saves a ping round trip per socket and interval —
// a write, a read and three goroutine wake-ups, the CPU of a fan-out.

// startWriterLocked starts the socket's writer unless one runs. Once the
// socket is closed the writer that sends the close frame is the last one.
func (c *conn) startWriterLocked() {
	if c.writing {
		return
	}
	c.writing = true
	c.writers.Add(1)
	go c.writeLoop()
}

// startPings arms the socket's ping timer; the hub calls it once the socket
// is registered. The first ping comes after a random ½–1 PingInterval, so
// that the sockets of a mass reconnect (a push restart, a sale's opening) do
// not all ping in the same instant of every interval.
func (c *conn) startPings() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	half := c.hub.cfg.PingInterval / 2
	c.pingTimer = time.AfterFunc(half+rand.N(half+1), c.pingTimerFired)
}

// pingTimerFired asks the writer for a ping, or re-arms the timer for the
// rest of the interval if a message went out meanwhile.
func (c *conn) pingTimerFired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if last := c.lastSent.Load(); last != 0 {
		if rest := c.hub.cfg.PingInterval - time.Since(time.Unix(0, last)); rest > 0 {
			c.pingTimer.Reset(rest)
			return
		}
	}
	c.pingDue = true
	c.startWriterLocked()
}

// writeLoop sends the queued messages and a due ping until there is nothing
// left, or the close frame once the socket is killed.
func (c *conn) writeLoop() {
	defer c.writers.Done()
	for {
		c.mu.Lock()
		if c.closed {
			code, reason := c.closeCode, c.closeReason
			c.queue = nil
			if c.pingTimer != nil {
				c.pingTimer.Stop()
			}
			if c.expire != nil {
				c.expire.Stop()
			}
			c.mu.Unlock() // writing stays true: no writer starts after this one
			c.finish(code, reason)
			return
		}
		var data []byte
		ping := false
		switch {
		case len(c.queue) > 0:
			data = c.queue[0]
			c.queue[0] = nil
			if c.queue = c.queue[1:]; len(c.queue) == 0 {
				c.queue = nil // an idle socket keeps no buffer
			}
		case c.pingDue:
			c.pingDue, ping = false, true
		default:
			c.writing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		var err error
		if ping {
			err = c.ping()
		} else {
			err = c.write(data)
		}
		if err != nil { // the peer is gone or too slow: no close handshake
			c.kill(websocket.StatusNormalClosure, "")
		}
	}
}

// write sends one text message, bounded by WriteTimeout, and notes when.
func (c *conn) write(data []byte) error {
	now := time.Now()
	var err error
	if c.nc == nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.hub.cfg.WriteTimeout)
		err = c.ws.Write(ctx, websocket.MessageText, data)
		cancel()
	} else {
		// A deadline on the connection rather than a context: no timer and
		// no context per message when a line moves for every socket at once.
		if err = c.nc.SetWriteDeadline(now.Add(c.hub.cfg.WriteTimeout)); err != nil {
			return err // closed
		}
		if err = c.ws.Write(context.Background(), websocket.MessageText, data); err == nil {
			err = c.nc.SetWriteDeadline(time.Time{})
		}
	}
	if err == nil {
		c.lastSent.Store(now.UnixNano())
	}
	return err
}

// ping sends a ping and waits for its answer (read by the reader), bounded
// by WriteTimeout, then arms the timer for the next one.
func (c *conn) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.hub.cfg.WriteTimeout)
	defer cancel()
	if err := c.ws.Ping(ctx); err != nil {
		c.hub.log.Debug("ping failed", "user", c.userID, "err", err)
		return err
	}
	c.mu.Lock()
	if !c.closed {
		c.pingTimer.Reset(c.hub.cfg.PingInterval)
	}
	c.mu.Unlock()
	return nil
}

// finish takes the socket out of the hub and closes it: with a close
// handshake carrying code and reason, or at once when the peer went away
// first (a normal closure without a reason).
func (c *conn) finish(code websocket.StatusCode, reason string) {
	c.hub.unregister(c) // no more messages: leave the registry now, not after the handshake
	if code == websocket.StatusNormalClosure && reason == "" {
		c.ws.CloseNow()
		return
	}
	closeBounded(c.ws, c.nc, c.hub.cfg.WriteTimeout, code, reason)
}

// offload runs fn on a goroutine of its own and waits for it. The socket's
// reader calls its loads (database, Redis) this way: a goroutine's stack
// grows to the deepest call it made and shrinks only slowly, so the reader,
// parked in a read for the socket's whole life, would otherwise keep the
// stack of a client library's call path.
func offload(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}
