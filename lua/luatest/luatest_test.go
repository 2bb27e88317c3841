package luatest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// onPrivate points Addr at a Redis server of the test's own (16 databases)
// and returns a client per database 0-15.
func onPrivate(t *testing.T) []*redis.Client {
	t.Helper()
	admin := Private(t)
	t.Setenv("STAMPEDE_TEST_REDIS_ADDR", admin.Options().Addr)
	dbs := make([]*redis.Client, 16)
	for i := range dbs {
		dbs[i] = redis.NewClient(&redis.Options{Addr: admin.Options().Addr, DB: i})
		t.Cleanup(func() { dbs[i].Close() })
	}
	return dbs
}

// A developer's Redis with data in every database but one: Claim takes the
// empty one, and every key of the others is still there after the claim,
// the test's writes and the release.
func TestClaimTakesOnlyAnEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	dbs := onPrivate(t)
	for i, c := range dbs {
		if i != 9 {
			c.Set(ctx, "mydev:key", fmt.Sprint("keep-", i), 0)
		}
	}
	d, err := Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.DB != 9 {
		t.Fatalf("claimed db %d, want 9, the only empty one", d.DB)
	}
	c := d.Client()
	defer c.Close()
	c.Set(ctx, "stampede:{p:1}:stock", "7", 0)
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.DBSize(ctx).Val(); n != 1 || c.Exists(ctx, ClaimKey).Val() != 1 {
		t.Fatalf("after Flush: %d keys, claim key %d; want only the claim", n, c.Exists(ctx, ClaimKey).Val())
	}
	c.Set(ctx, "stampede:{p:1}:stock", "7", 0)
	if err := d.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("released db 9 holds %d keys, want none", n)
	}
	for i, c := range dbs {
		if i == 9 {
			continue
		}
		if v := c.Get(ctx, "mydev:key").Val(); v != fmt.Sprint("keep-", i) || c.DBSize(ctx).Val() != 1 {
			t.Errorf("db %d: mydev:key %q, %d keys: the developer's data was touched", i, v, c.DBSize(ctx).Val())
		}
	}

	// No empty database left: a clear refusal, nothing touched.
	dbs[9].Set(ctx, "mydev:key", "keep-9", 0)
	if _, err := Claim(ctx); err == nil || !strings.Contains(err.Error(), "no empty redis db") {
		t.Fatalf("claim on a full server: %v, want a refusal", err)
	}
	if v := dbs[9].Get(ctx, "mydev:key").Val(); v != "keep-9" {
		t.Fatalf("db 9 after the refusal: %q", v)
	}
}

// A claim left by a run killed before its cleanup is taken over (its data
// emptied) when its lease ended or its process on this host is gone; a live
// claim of another host, and a key that merely looks like a claim, are not.
func TestClaimTakesOverOnlyStaleClaims(t *testing.T) {
	ctx := context.Background()
	dbs := onPrivate(t)
	for _, c := range dbs[1:] {
		c.Set(ctx, "mydev:key", "keep", 0)
	}
	now := time.Now()
	deadPID := 1 << 22 // above the kernel's pid_max: no such process
	cases := []struct {
		name  string
		claim string
		stale bool
	}{
		{"lease ended", fmt.Sprintf("aa|%d|elsewhere|1", now.Add(-time.Minute).UnixMilli()), true},
		{"process of this host gone", fmt.Sprintf("bb|%d|%s|%d", now.Add(time.Hour).UnixMilli(), hostname(), deadPID), true},
		{"live, another host", fmt.Sprintf("cc|%d|elsewhere|%d", now.Add(time.Hour).UnixMilli(), deadPID), false},
		{"live, this process", fmt.Sprintf("dd|%d|%s|%d", now.Add(time.Hour).UnixMilli(), hostname(), os.Getpid()), false},
		{"not a claim", "someone's value", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dbs[5]
			c.FlushDB(ctx)
			c.Set(ctx, ClaimKey, tc.claim, 0)
			c.Set(ctx, "stampede:left", "by the old run", 0)
			d, err := Claim(ctx)
			if !tc.stale {
				if err == nil {
					t.Fatalf("claimed db %d over %q", d.DB, tc.claim)
				}
				if v := c.Get(ctx, ClaimKey).Val(); v != tc.claim || c.Exists(ctx, "stampede:left").Val() != 1 {
					t.Fatalf("db 5 changed: claim %q", v)
				}
				return
			}
			if err != nil || d.DB != 5 {
				t.Fatalf("claim over a stale claim: %+v %v, want db 5", d, err)
			}
			if c.Exists(ctx, "stampede:left").Val() != 0 {
				t.Fatal("the stale claim's data was not emptied")
			}
			if err := d.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Release and Flush leave a database alone once another claim holds it.
func TestReleaseLeavesAnotherClaimAlone(t *testing.T) {
	ctx := context.Background()
	dbs := onPrivate(t)
	d, err := Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := dbs[d.DB]
	c.Set(ctx, ClaimKey, "someone else", 0)
	c.Set(ctx, "theirs", "1", 0)
	for _, f := range []func(context.Context) error{d.Flush, d.Release} {
		if err := f(ctx); err == nil || !strings.Contains(err.Error(), "no longer claimed") {
			t.Fatalf("flush/release of a database claimed by another: %v", err)
		}
	}
	if c.Get(ctx, "theirs").Val() != "1" {
		t.Fatal("another claim's data was emptied")
	}
}

// New: one database per label and test, emptied on each call, given back
// (empty, unclaimed) when the test ends.
func TestNewOneDatabasePerLabelAndTest(t *testing.T) {
	ctx := context.Background()
	dbs := onPrivate(t)
	var first, second int
	t.Run("test", func(t *testing.T) {
		a := New(t, DBLua)
		a.Set(ctx, "stampede:x", "1", 0)
		again := New(t, DBLua)
		b := New(t, DBGateway)
		first, second = a.Options().DB, b.Options().DB
		if again.Options().DB != first || first == second {
			t.Fatalf("dbs %d, %d (same label), %d (other label)", first, again.Options().DB, second)
		}
		if a.Exists(ctx, "stampede:x").Val() != 0 {
			t.Fatal("a second New with the same label did not empty the database")
		}
		a.Set(ctx, "stampede:x", "1", 0)
		if err := Flush(ctx, a); err != nil || a.Exists(ctx, "stampede:x").Val() != 0 || a.Exists(ctx, ClaimKey).Val() != 1 {
			t.Fatalf("Flush: %v; want the data gone and the claim kept", err)
		}
		a.Set(ctx, "stampede:x", "1", 0)
	})
	for _, db := range []int{first, second} {
		if n := dbs[db].DBSize(ctx).Val(); n != 0 {
			t.Errorf("db %d holds %d keys after its test ended, want none", db, n)
		}
	}
}

// A label is no database number: used as one it fails loudly instead of
// writing into another test's database.
func TestLabelsAreNoDatabaseNumbers(t *testing.T) {
	admin := Private(t)
	c := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, DB: DBPipeline})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("a client on db %d: %v, want DB index is out of range", DBPipeline, err)
	}
}
