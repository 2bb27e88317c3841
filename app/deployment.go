package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-sh/stampede/gateway"
	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/pipeline"
)

// checkDeployment compares this database's deployment identity with the
// one the Redis DB carries (docs/production.md "Deployment identity"): an unmarked
// Redis DB is claimed for this deployment, one that carries another identity
// makes every role refuse to start with deploymentRefusal's explanation. It
// records the identity in cfg, so the roles' RabbitMQ topology declares it
// too (checkTopology, vhostRefusal).
func checkDeployment(ctx context.Context, cfg *Config, store *persistence.Store, rdb redis.UniversalClient, log *slog.Logger) error {
	ours, err := store.DeploymentID(ctx)
	if err != nil {
		return err
	}
	cfg.deployment = ours
	claimed, err := lua.ClaimDeployment(ctx, rdb, ours)
	var de *lua.DeploymentError
	if errors.As(err, &de) {
		return deploymentRefusal(cfg, de)
	}
	if err != nil {
		return fmt.Errorf("redis at %s: deployment identity: %w", cfg.RedisAddr, err)
	}
	if claimed {
		log.Info("redis db claimed for this deployment", "deployment", ours, "redis", cfg.RedisAddr, "redisDb", cfg.RedisDB)
	}
	return nil
}

// errWrongDeployment marks a start refused because the Redis DB belongs to
// another deployment.
var errWrongDeployment = errors.New("redis db belongs to another deployment")

// deploymentRefusal is the error a role starts with on another deployment's
// Redis DB: both identities and the two ways out.
func deploymentRefusal(cfg *Config, de *lua.DeploymentError) error {
	return fmt.Errorf("%w: Redis DB %d at %s carries deployment identity %s (key %s), but this MySQL database (%s) is deployment %s. "+
		"Refusing to start: that Redis DB holds another Stampede database's stock, reservations and intake streams, and using it "+
		"would sell that stock as this database's products. Either point this deployment at a Redis DB of its own "+
		"(STAMPEDE_REDIS_DB / --redis-db, or another STAMPEDE_REDIS_ADDR), or, if the other deployment's data in it is no longer "+
		"needed, stop that deployment and run `stampede redis-takeover` with this configuration (it refuses while the Redis DB "+
		"holds reservations not yet written to a database, then deletes its Stampede keys and claims it)",
		errWrongDeployment, cfg.RedisDB, cfg.RedisAddr, de.Theirs, de.Key, mysqlName(cfg.MySQLDSN), de.Ours)
}

// errWrongVhost marks a start refused because the RabbitMQ vhost belongs to
// another deployment.
var errWrongVhost = errors.New("rabbitmq vhost belongs to another deployment")

// vhostRefusal is the error a role that uses RabbitMQ starts with on another
// deployment's vhost: both identities and the ways out.
func vhostRefusal(cfg *Config, de *pipeline.VhostDeploymentError) error {
	return fmt.Errorf("%w: RabbitMQ vhost %q (STAMPEDE_AMQP_URL) carries deployment identity %s (marker queue %s), but this MySQL "+
		"database (%s) is deployment %s. Refusing to start: the two deployments would consume each other's order events, give "+
		"back each other's stock and push each other's statuses. Either point this deployment at a vhost of its own "+
		"(STAMPEDE_AMQP_URL ending in /<vhost>), or, if the other deployment is gone, stop its processes, let its queues drain and "+
		"delete its marker (`rabbitmqctl delete_queue -p %s %s`); the next start claims the vhost",
		errWrongVhost, de.Vhost, de.Theirs, pipeline.QueueDeployment, mysqlName(cfg.MySQLDSN), de.Ours, de.Vhost, pipeline.QueueDeployment)
}

// mysqlName is "<database> at <address>" of dsn, for messages (no
// credentials).
func mysqlName(dsn string) string {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "the configured STAMPEDE_MYSQL_DSN"
	}
	return fmt.Sprintf("%s at %s", c.DBName, c.Addr)
}

// runTakeover is `stampede redis-takeover`: hands the configured Redis DB
// to this database's deployment. It refuses (exit 1, nothing changed) while
// the Redis DB holds live reservations (lua.LiveReservations); otherwise it
// deletes every Stampede key of the Redis DB, claims it, and loads this
// database's products into it (reloadProducts). On a Redis DB that is
// already this deployment's it changes nothing.
func runTakeover(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parse("redis-takeover", args, nil)
	if err != nil {
		return err
	}
	store, err := persistence.Open(ctx, cfg.MySQLDSN)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := persistence.Validate(ctx, store.DB); err != nil {
		return err
	}
	ours, err := store.DeploymentID(ctx)
	if err != nil {
		return err
	}
	rdb := newRedis(cfg)
	defer rdb.Close()
	keys, err := lua.DeploymentKeys(ctx, rdb)
	if err != nil {
		return fmt.Errorf("redis at %s: %w", cfg.RedisAddr, err)
	}
	theirs := map[string]bool{}
	for _, k := range keys {
		v, err := rdb.Get(ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("redis at %s: %w", cfg.RedisAddr, err)
		}
		if v != ours {
			theirs[cmp.Or(v, "(none)")] = true
		}
	}
	if len(theirs) == 0 {
		fmt.Fprintf(stdout, "redis-takeover: Redis DB %d at %s already carries this deployment's identity %s; nothing changed\n",
			cfg.RedisDB, cfg.RedisAddr, ours)
		return nil
	}
	deleted, err := lua.Takeover(ctx, rdb, ours)
	var le *lua.LiveError
	if errors.As(err, &le) {
		return fmt.Errorf("redis-takeover: refused, nothing changed: Redis DB %d at %s holds %d intake entries and %d pending order "+
			"records that no database has stored yet (e.g. %s): reservations the other deployment accepted. Let its writers store "+
			"them (start its writer role until its intake streams are empty), then run redis-takeover again",
			cfg.RedisDB, cfg.RedisAddr, le.Live.IntakeEntries, le.Live.OrderRecords, strings.Join(le.Live.Examples, ", "))
	}
	if err != nil {
		return fmt.Errorf("redis-takeover: %w", err)
	}
	loaded, err := reloadProducts(ctx, store, rdb)
	if err != nil {
		return fmt.Errorf("redis-takeover: deleted %d keys and claimed the Redis DB, but reloading this database's products failed "+
			"(run redis-takeover again): %w", deleted, err)
	}
	fmt.Fprintf(stdout, "redis-takeover: Redis DB %d at %s carried deployment %s; deleted its %d Stampede keys, claimed it for "+
		"deployment %s and loaded this database's %d products\n",
		cfg.RedisDB, cfg.RedisAddr, strings.Join(keysOf(theirs), ", "), deleted, ours, loaded)
	return nil
}

// reloadProducts loads every product of store into an emptied Redis DB:
// each stock shard with its share of the units not taken by an order in
// PROCESSING, WAITING_PAY or PAID (docs/spec.md §5.2), and the sale's current terms
// (pause included), and the waiting room a product had on (its stored terms
// and commitment, persistence.Store.Room): a drop stays behind its room, it
// does not open to whoever orders first. The room's line and draw entries
// lived only in Redis: buyers take their tickets again (docs/production.md
// "Deployment identity"). It returns the products loaded.
func reloadProducts(ctx context.Context, store *persistence.Store, rdb redis.UniversalClient) (int, error) {
	products, err := store.ListProducts(ctx)
	if err != nil {
		return 0, err
	}
	counts, err := store.CountOrders(ctx, 0)
	if err != nil {
		return 0, err
	}
	taken := map[int64]int64{}
	for _, c := range counts {
		if c.Status == order.Processing || c.Status == order.WaitingPay || c.Status == order.Paid {
			taken[c.ProductID] += c.Units
		}
	}
	sh := &lua.Sharded{RDB: rdb, Do: func(fn func(ctx context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return fn(cctx)
	}}
	for _, p := range products {
		left := max(p.Units()-taken[p.ID], 0)
		if err := sh.LoadProduct(lua.Product{ID: p.ID, Incarnation: p.Incarnation, Total: p.Total, Available: &left,
			Shards: p.Shards, Price: p.Price, PerUserLimit: p.PerUserLimit, MaxPerOrder: p.MaxPerOrder,
			SaleStart: p.SaleStart, SaleEnd: p.SaleEnd}); err != nil {
			return 0, err
		}
		if err := sh.UpdateSale(lua.SaleTerms{ProductID: p.ID, Shards: p.Shards, Version: p.SaleVersion, Price: p.Price,
			PerUserLimit: p.PerUserLimit, MaxPerOrder: p.MaxPerOrder, SaleStart: p.SaleStart, SaleEnd: p.SaleEnd,
			Paused: p.Paused}); err != nil {
			return 0, err
		}
		if err := reloadRoom(ctx, store, rdb, p); err != nil {
			return 0, err
		}
	}
	return len(products), nil
}

// reloadRoom writes p's stored waiting-room terms to Redis if its room is
// on; nothing for a product that never had a room or has it off.
func reloadRoom(ctx context.Context, store *persistence.Store, rdb redis.UniversalClient, p persistence.Product) error {
	t, err := store.Room(ctx, p.ID)
	if errors.Is(err, persistence.ErrNotFound) || (err == nil && !t.On) {
		return nil
	}
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := lua.SetRoom(cctx, rdb, p.ID, gateway.RoomSettings(t, p.Shards)); err != nil {
		return fmt.Errorf("waiting room of product %d: %w", p.ID, err)
	}
	return nil
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
