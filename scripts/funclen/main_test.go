package main

import (
	"bytes"
	"testing"
)

func TestLongFunctions(t *testing.T) {
	funcs, err := longFunctions([]string{"testdata"}, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	report(&out, funcs, 3)
	want := "    5  testdata/pkg.TestLong                              testdata/pkg/a_test.go:5\n" +
		"    5  testdata/pkg.long                                  testdata/pkg/a.go:7\n" +
		"    4  testdata/pkg.box.get                               testdata/pkg/a.go:16\n" +
		"3 functions over 3 lines\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}

	funcs, err = longFunctions([]string{"testdata"}, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(funcs) != 1 || funcs[0].name != "testdata/pkg.long" || funcs[0].lines != 5 {
		t.Errorf("-max 4 -tests=false: %+v", funcs)
	}
}
