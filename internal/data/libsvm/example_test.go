package libsvm_test

import (
	"fmt"
	"io"
	"strings"

	"github.com/paramserv/paramserv/internal/data/libsvm"
)

func ExampleReader() {
	const data = `+1 3:1 11:1 14:0.5
# a comment line
-1 5:1 7:1
-1 2:x
`
	r, err := libsvm.NewReader(strings.NewReader(data), "train.txt",
		libsvm.Options{NumFeatures: 123, SkipBadLines: true})
	if err != nil {
		panic(err)
	}
	for {
		ex, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(ex.Label, ex.Keys, ex.Vals)
	}
	fmt.Printf("%+v\n", r.Stats())
	// Output:
	// 1 [2 10 13] [1 1 0.5]
	// 0 [4 6] [1 1]
	// {Lines:4 Examples:2 Skipped:1}
}
