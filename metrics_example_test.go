package paramserv_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"

	"github.com/paramserv/paramserv"
)

// A program with its own loop serves its worker's Prometheus metrics:
// under paramserv local -- CMD every worker gets a port through
// PARAMSERV_METRICS_ADDR; here the program asks for a free one. Each call
// is counted and timed with its bytes, and ReportLoss gives the loss of
// each batch to the metrics, the status page and local's progress line.
func ExampleWorker_ReportLoss() {
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	cluster := fmt.Sprintf(`"cluster":{"ps":[%q],"worker":["127.0.0.1:1"]}`, lis.Addr())
	go paramserv.ServePS(ctx, paramserv.PSConfig{
		TFConfig: `{` + cluster + `,"task":{"type":"ps","index":0}}`,
		Listen:   func(string) (net.Listener, error) { return lis, nil },
	})
	w, err := paramserv.Start(ctx, paramserv.Config{
		TFConfig:    `{` + cluster + `,"task":{"type":"worker","index":0}}`,
		Variables:   []paramserv.Variable{{Name: "weight", Shape: []int{1}}},
		Optimizer:   paramserv.Optimizer{Name: "sgd", LearningRate: 0.1},
		Sync:        true,
		MetricsAddr: "127.0.0.1:0",
	}, paramserv.Params{"weight": {0}})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	params, grads := w.NewParams(), w.NewParams()
	if _, err := w.Pull(ctx, params); err != nil {
		log.Fatal(err)
	}
	for w.Step() < 50 {
		e := params["weight"][0] - 3 // the loss e² of the one-example batch
		grads["weight"][0] = 2 * e
		w.ReportLoss(float64(e*e), 1)
		if _, err := w.PushPull(ctx, grads, params); err != nil {
			log.Fatal(err)
		}
	}

	resp, err := http.Get("http://" + w.MetricsAddr() + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		for _, series := range []string{`paramserv_worker_calls_total{call="pull"}`, `paramserv_worker_calls_total{call="push_pull"}`,
			"paramserv_worker_examples_total", "paramserv_worker_global_step", `paramserv_worker_push_bytes_total{kind="dense"}`} {
			if strings.HasPrefix(sc.Text(), series+" ") {
				fmt.Println(sc.Text())
			}
		}
	}
	if err := w.Done(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// paramserv_worker_calls_total{call="pull"} 1
	// paramserv_worker_calls_total{call="push_pull"} 50
	// paramserv_worker_examples_total 50
	// paramserv_worker_global_step 50
	// paramserv_worker_push_bytes_total{kind="dense"} 200
}
