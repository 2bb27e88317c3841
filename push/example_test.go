package push_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/stampede-sh/stampede/auth"
	"github.com/stampede-sh/stampede/push"
)

// snapshots would read order_info; see the push.Snapshotter contract.
type snapshots struct{}

func (snapshots) OrderSnapshot(ctx context.Context, userID int64, orderNo string) (push.Snapshot, error) {
	return push.Snapshot{}, push.ErrNotFound
}

func (snapshots) RecentOrders(ctx context.Context, userID int64, limit int) ([]push.Snapshot, error) {
	return nil, nil
}

// A push instance and a buyer's socket: the hub authenticates the socket by
// its bearer token (in the WebSocket subprotocol) and broadcasts the product
// stock fed by the caller. A real instance runs with Run on Config.Addr
// (127.0.0.1:8081/ws), takes status events from RabbitMQ (its URL instead
// of "") and stops on Ctrl-C (signal.NotifyContext); Serve returns after
// closing every socket with 1001.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	secret := []byte("jwt secret")
	hub, err := push.New(push.Config{}, auth.NewVerifier(secret), snapshots{}, "", slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	served := make(chan error, 1)
	go func() { served <- hub.Serve(ctx, ln) }()

	// The buyer's browser.
	tok, err := auth.Issue(secret, 1, false, time.Hour)
	if err != nil {
		fmt.Println(err)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, "ws://"+ln.Addr().String()+"/ws",
		&websocket.DialOptions{Subprotocols: []string{push.Subprotocol, tok}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ws.CloseNow()
	for hub.Stats().Sockets == 0 && dctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}

	// e.g. on every stock change the gateway observes:
	hub.PublishProduct(7, 42, false)
	for {
		_, data, err := ws.Read(dctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		if strings.Contains(string(data), `"type":"product"`) {
			fmt.Println(string(data))
			break
		}
	}
	ws.CloseRead(context.Background()) // answer the hub's close handshake
	stop()
	fmt.Println("push stopped:", <-served)
	// Output:
	// {"type":"product","productId":7,"available":42,"soldOut":false}
	// push stopped: <nil>
}
