package criteo_test

import (
	"fmt"
	"strings"

	"github.com/paramserv/paramserv/internal/data/criteo"
	"github.com/paramserv/paramserv/internal/data/sparsedata"
)

func ExampleReader() {
	// Two integer and two categorical fields; the second line misses I2
	// and C1, the third has a bad integer.
	const data = "1\t5\t1382\t68fd1e64\t80e26c9b\n" +
		"0\t0\t\t\tfb936136\n" +
		"0\tx\t1\ta\tb\n"
	r, err := criteo.NewReader(strings.NewReader(data), "day_0",
		criteo.Options{IntFields: 2, CatFields: 2, SkipBadLines: true,
			OnSkip: func(e *sparsedata.ParseError) { fmt.Println("skipped:", e) }})
	if err != nil {
		panic(err)
	}
	d, err := sparsedata.ReadAll(r)
	if err != nil {
		panic(err)
	}
	for i := range d.Len() {
		ex := d.At(i)
		fmt.Println(ex.Label, len(ex.Keys), ex.Keys[0] == criteo.IntKey(0, criteo.Bucket(int64(5-5*i))))
	}
	fmt.Println(criteo.Bucket(1382))
	// Output:
	// skipped: day_0:3: token "x": integer field I1 is not an integer
	// 1 4 true
	// 0 2 true
	// 52
}
