package cluster

import (
	"reflect"
	"strings"
	"testing"
)

// Real TF_CONFIG values, as the Kubeflow TFJob operator and TensorFlow's
// docs write them.
const (
	tfWorker1 = `{"cluster":{"ps":["mnist-ps-0.kubeflow.svc:2222"],"worker":["mnist-worker-0.kubeflow.svc:2222","mnist-worker-1.kubeflow.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}`
	tfPS0     = `{"cluster": {"ps": ["ps0:2222", "ps1:2222"], "worker": ["w0:2222"]}, "task": {"type": "ps", "index": 0}, "rpc_layer": "grpc"}`
	tfChief   = `{"cluster":{"chief":["chief-0:2222"],"ps":["ps-0:2222"],"worker":["worker-0:2222","worker-1:2222"]},"task":{"type":"chief","index":0},"environment":"cloud"}`
	tfChiefW1 = `{"cluster":{"chief":["chief-0:2222"],"ps":["ps-0:2222"],"worker":["worker-0:2222","worker-1:2222"]},"task":{"type":"worker","index":1}}`
	tfMaster  = `{"cluster":{"master":["master-0:2222"],"ps":["ps-0:2222"],"worker":["worker-0:2222"]},"task":{"type":"master","index":0},"environment":"cloud"}`
	tfEval    = `{"cluster":{"chief":["c:2222"],"ps":["p:2222"],"worker":["w:2222"],"evaluator":["e:2222"]},"task":{"type":"worker","index":0}}`
	tfIPv6    = `{"cluster":{"ps":["[::1]:2222"],"worker":["[::1]:2223","[fe80::1%eth0]:2224"]},"task":{"type":"worker","index":1}}`
)

func TestParseTFConfig(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     TFConfig
	}{
		{"worker", tfWorker1, TFConfig{
			PS: []string{"mnist-ps-0.kubeflow.svc:2222"}, PSSet: true,
			Workers: []string{"mnist-worker-0.kubeflow.svc:2222", "mnist-worker-1.kubeflow.svc:2222"}, WorkersSet: true,
			Job: "worker", Index: 1, IndexSet: true,
		}},
		{"ps", tfPS0, TFConfig{
			PS: []string{"ps0:2222", "ps1:2222"}, PSSet: true, Workers: []string{"w0:2222"}, WorkersSet: true,
			Job: "ps", Index: 0, IndexSet: true,
		}},
		{"chief is worker 0", tfChief, TFConfig{
			PS: []string{"ps-0:2222"}, PSSet: true,
			Workers: []string{"chief-0:2222", "worker-0:2222", "worker-1:2222"}, WorkersSet: true, Chief: "chief",
			Job: "worker", Index: 0, IndexSet: true,
		}},
		{"worker i is worker i+1 after a chief", tfChiefW1, TFConfig{
			PS: []string{"ps-0:2222"}, PSSet: true,
			Workers: []string{"chief-0:2222", "worker-0:2222", "worker-1:2222"}, WorkersSet: true, Chief: "chief",
			Job: "worker", Index: 2, IndexSet: true,
		}},
		{"master", tfMaster, TFConfig{
			PS: []string{"ps-0:2222"}, PSSet: true,
			Workers: []string{"master-0:2222", "worker-0:2222"}, WorkersSet: true, Chief: "master",
			Job: "worker", Index: 0, IndexSet: true,
		}},
		{"chief alone", `{"cluster":{"chief":["c:1"],"ps":["p:1"]},"task":{"type":"chief"}}`, TFConfig{
			PS: []string{"p:1"}, PSSet: true, Workers: []string{"c:1"}, WorkersSet: true, Chief: "chief",
			Job: "worker", Index: 0, IndexSet: true,
		}},
		{"evaluator ignored", tfEval, TFConfig{
			PS: []string{"p:2222"}, PSSet: true, Workers: []string{"c:2222", "w:2222"}, WorkersSet: true, Chief: "chief",
			Job: "worker", Index: 1, IndexSet: true,
			Warnings: []string{"TF_CONFIG cluster.evaluator ignored: paramserv runs no evaluator job"},
		}},
		{"ipv6", tfIPv6, TFConfig{
			PS: []string{"[::1]:2222"}, PSSet: true, Workers: []string{"[::1]:2223", "[fe80::1%eth0]:2224"}, WorkersSet: true,
			Job: "worker", Index: 1, IndexSet: true,
		}},
		{"no index is index 0", `{"task":{"type":"ps"}}`, TFConfig{Job: "ps", Index: 0, IndexSet: true}},
		{"index without type", `{"task":{"index":3}}`, TFConfig{Index: 3, IndexSet: true}},
		{"index 2.0 is whole", `{"task":{"type":"ps","index":2.0}}`, TFConfig{Job: "ps", Index: 2, IndexSet: true}},
		{"index -0", `{"task":{"type":"ps","index":-0}}`, TFConfig{Job: "ps", Index: 0, IndexSet: true}},
		{"cluster only", `{"cluster":{"ps":["p:1"]}}`, TFConfig{PS: []string{"p:1"}, PSSet: true}},
		{"empty list is set", `{"cluster":{"worker":[]}}`, TFConfig{Workers: nil, WorkersSet: true}},
		{"nulls are absent", `{"cluster":null,"task":{"type":null,"index":null}}`, TFConfig{}},
		{"empty object", `{}`, TFConfig{}},
		{"unknown keys", `{"environment":"cloud","rpc_layer":"grpc","x":[1,{}]}`, TFConfig{}},
		{"whitespace", " \n{ \"task\" : { \"type\" : \"worker\" , \"index\" : 0 } }\n", TFConfig{Job: "worker", IndexSet: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTFConfig(tc.in)
			if err != nil {
				t.Fatalf("ParseTFConfig(%s): %v", tc.in, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseTFConfig(%s)\n got %+v\nwant %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseTFConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, source string
		pieces           []string
	}{
		{"too big", `{"x":"` + strings.Repeat("a", MaxTFConfigSize) + `"}`, "TF_CONFIG", []string{"1048584 bytes", "1 MiB"}},
		{"syntax", `{"cluster":{"ps":}}`, "TF_CONFIG", []string{"invalid JSON at offset 17", "invalid character '}'", `want a JSON object like {"cluster"`}},
		{"truncated", `{"cluster":`, "TF_CONFIG", []string{"invalid JSON at offset", "unexpected end"}},
		{"empty", ``, "TF_CONFIG", []string{"invalid JSON", "unexpected end"}},
		{"trailing data", `{} {}`, "TF_CONFIG", []string{"invalid JSON at offset 3"}},
		{"top array", `[1,2]`, "TF_CONFIG", []string{"got array [1,2]", "want a JSON object"}},
		{"top string", `"ps"`, "TF_CONFIG", []string{`got string "ps"`}},
		{"top null", `null`, "TF_CONFIG", []string{"got null, want a JSON object"}},
		{"null list", `{"cluster":{"ps":null}}`, "TF_CONFIG cluster.ps", []string{`got null, want a list of "host:port" strings`}},
		{"cluster list", `{"cluster":["h:1"]}`, "TF_CONFIG cluster", []string{"got array", `want an object like {"ps"`}},
		{"task string", `{"task":"worker"}`, "TF_CONFIG task", []string{`got string "worker"`, `want an object like {"type":"worker","index":0}`}},
		{"job not list", `{"cluster":{"ps":"h:1"}}`, "TF_CONFIG cluster.ps", []string{`got string "h:1"`, `want a list of "host:port" strings`}},
		{"job as dict", `{"cluster":{"worker":{"0":"h:1"}}}`, "TF_CONFIG cluster.worker", []string{"got object", "want a list"}},
		{"host not string", `{"cluster":{"ps":["h:1",2222]}}`, "TF_CONFIG cluster.ps[1]", []string{"got number 2222", `want a "host:port" string`}},
		{"bad host", `{"cluster":{"worker":["w:1","localhost"]}}`, "TF_CONFIG cluster.worker[1]", []string{`"localhost" is not host:port`, "missing port", "127.0.0.1:2222"}},
		{"ipv6 no brackets", `{"cluster":{"ps":["::1:2222"]}}`, "TF_CONFIG cluster.ps[0]", []string{"[::1]:2222"}},
		{"empty host entry", `{"cluster":{"ps":[""]}}`, "TF_CONFIG cluster.ps[0]", []string{`"" is empty`}},
		{"unknown job", `{"cluster":{"workers":["h:1"]}}`, "TF_CONFIG cluster", []string{`unknown job "workers"`, `"worker"`}},
		{"upper-case job", `{"cluster":{"PS":["h:1"]}}`, "TF_CONFIG cluster", []string{`unknown job "PS"`, "lower case"}},
		{"ps twice", `{"cluster":{"ps":["a:1"],"worker":["w:1"],"ps":["b:1"]}}`, "TF_CONFIG cluster", []string{`member "ps" given twice`}},
		{"task twice", `{"cluster":{"ps":["a:1"],"worker":["w:1"]},"task":{"type":"worker","index":0},"task":{"type":"ps","index":0}}`, "TF_CONFIG", []string{`member "task" given twice`}},
		{"two chiefs", `{"cluster":{"chief":["a:1","b:1"]}}`, "TF_CONFIG cluster.chief", []string{"has 2 hosts", "exactly one"}},
		{"empty chief", `{"cluster":{"master":[]}}`, "TF_CONFIG cluster.master", []string{"has 0 hosts", "exactly one"}},
		{"chief and master", `{"cluster":{"chief":["a:1"],"master":["b:1"]}}`, "TF_CONFIG cluster", []string{`both "chief" and "master"`}},
		{"type not string", `{"task":{"type":1}}`, "TF_CONFIG task.type", []string{"got number 1", "want a string"}},
		{"type empty", `{"task":{"type":""}}`, "TF_CONFIG task.type", []string{"empty", `"ps", "worker" or "chief"`}},
		{"type unknown", `{"task":{"type":"driver"}}`, "TF_CONFIG task.type", []string{`"driver" is not a job`, `"ps", "worker", "chief" or "master"`}},
		{"type upper", `{"task":{"type":"Worker"}}`, "TF_CONFIG task.type", []string{`"Worker" is not a job`, "lower case"}},
		{"evaluator task", `{"cluster":{"evaluator":["e:1"]},"task":{"type":"evaluator","index":0}}`, "TF_CONFIG task.type", []string{`"evaluator" is not supported`}},
		{"chief task without chief", `{"cluster":{"worker":["w:1"]},"task":{"type":"chief","index":0}}`, "TF_CONFIG task.type", []string{`is "chief", but cluster has no "chief"`, "cluster.chief"}},
		{"chief index 1", `{"cluster":{"chief":["c:1"]},"task":{"type":"chief","index":1}}`, "TF_CONFIG task.index", []string{"task index 1 out of range: the chief job has 1 task (0..0)"}},
		{"negative index", `{"task":{"type":"worker","index":-1}}`, "TF_CONFIG task.index", []string{"-1 is negative", "0 or more"}},
		{"fractional index", `{"task":{"type":"worker","index":1.5}}`, "TF_CONFIG task.index", []string{"1.5 is not a whole number"}},
		{"string index", `{"task":{"type":"worker","index":"1"}}`, "TF_CONFIG task.index", []string{`got the string "1"`, `write "index": 1, without quotes`}},
		{"word index", `{"task":{"type":"worker","index":"one"}}`, "TF_CONFIG task.index", []string{`got the string "one"`, "whole number"}},
		{"bool index", `{"task":{"type":"worker","index":true}}`, "TF_CONFIG task.index", []string{"got boolean true"}},
		{"huge index", `{"task":{"type":"worker","index":1e30}}`, "TF_CONFIG task.index", []string{"1e30 is too large"}},
		{"overflow index", `{"task":{"type":"worker","index":1e400}}`, "TF_CONFIG task.index", []string{"too large"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTFConfig(tc.in)
			wantErr(t, err, tc.source, tc.pieces...)
		})
	}
}
