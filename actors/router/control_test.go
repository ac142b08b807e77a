package router

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

// TestControlMethodsMatchClient: the urgent mailbox finds a worker's calls by
// method index; the indexes it takes from the Router service descriptor must be those
// the generated grain client sends (messages/services_grain.pb.go).
func TestControlMethodsMatchClient(t *testing.T) {
	src, err := os.ReadFile("../../messages/services_grain.pb.go")
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]int{}
	re := regexp.MustCompile(`(?s)func \(g \*RouterGrainClient\) (\w+)\(.*?MethodIndex: (\d+)`)
	for _, m := range re.FindAllSubmatch(src, -1) {
		sent[string(m[1])], _ = strconv.Atoi(string(m[2]))
	}
	service := messages.File_services_proto.Services().ByName("Router")
	for _, name := range ControlMethods {
		i, ok := sent[string(name)]
		if !ok {
			t.Fatalf("the generated Router client has no method %s (found %v)", name, sent)
		}
		if d := service.Methods().ByName(name); d == nil || d.Index() != i {
			t.Errorf("%s: the client sends method index %d, the descriptor says %v", name, i, d)
		}
	}
	if len(sent) != service.Methods().Len() {
		t.Errorf("the client has %d methods, the service %d", len(sent), service.Methods().Len())
	}
}

// TestKindBuilds: the Router kind finds its service descriptor (the urgent mailbox panics
// on a service without the control methods).
func TestKindBuilds(t *testing.T) {
	if k := Kind(Config{}); k == nil || k.Props == nil {
		t.Fatalf("kind %v", k)
	}
}
