package synth_test

import (
	"context"
	"fmt"
	"os"

	"github.com/paramserv/paramserv/internal/data/synth"
)

func ExampleGenerate() {
	dir, err := os.MkdirTemp("", "synth")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg := synth.DefaultConfig()
	cfg.Out, cfg.Rows, cfg.Shards = dir, 20000, 4
	m, err := synth.Generate(context.Background(), cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Files, m.TestFile, m.TestRows)
	fmt.Println("Bayes AUC above 0.75:", *m.TestBayesAUC > 0.75)
	// Output:
	// [part-00000.tsv part-00001.tsv part-00002.tsv part-00003.tsv] test.tsv 2000
	// Bayes AUC above 0.75: true
}
