package gateway

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/stampede-sh/stampede/lua"
	"github.com/stampede-sh/stampede/persistence"
)

// A MySQL database restored from a backup taken before product N was
// created gives the next product id N again, while Redis still holds the
// stock of the forgotten product N (some of it sold). Creating the new
// product must be refused with 409 STOCK_CONFLICT, store nothing in MySQL
// and leave the old hash exactly as it was; before incarnations it was
// created and silently took over the old, half-sold stock.
func TestCreateProductRefusedAfterRestore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := e.product(openSale(10))
	e.accepted(500, first, 3, "before-the-restore")
	k := lua.ShardKeys(first, 0)
	before, err := e.rdb.HGetAll(ctx, k.Stock()).Result()
	if err != nil || before["available"] != "7" {
		t.Fatalf("old hash %v %v", before, err)
	}
	// The restore: the backup had no product `first` and no row of it.
	for _, q := range []string{
		`DELETE FROM admin_audit WHERE product_id = ?`, `DELETE FROM stock WHERE product_id = ?`, `DELETE FROM product WHERE id = ?`,
	} {
		if _, err := e.store.DB.ExecContext(ctx, q, first); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.store.DB.ExecContext(ctx, `ALTER TABLE product AUTO_INCREMENT = `+strconv.FormatInt(first, 10)); err != nil {
		t.Fatal(err)
	}

	spec := openSale(50)
	spec.Name = "After the restore"
	r := e.do("POST", "/api/admin/products", token(t, adminID), spec)
	r.wantError(t, 409, CodeStockConflict)
	if _, err := e.store.GetProduct(ctx, first); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("refused creation stored product %d: %v", first, err)
	}
	after, _ := e.rdb.HGetAll(ctx, k.Stock()).Result()
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("refused creation changed the old hash:\n before %v\n after  %v", before, after)
	}
	// The next id is free: a product gets it, with its own stock.
	next := e.product(spec)
	if next == first || e.available(next, 0) != 50 {
		t.Fatalf("next product %d (old %d): available %d", next, first, e.available(next, 0))
	}
}
