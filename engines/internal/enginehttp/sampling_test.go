package enginehttp

import (
	"testing"

	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

func TestOptionalSampling(t *testing.T) {
	temp, topP, seed := OptionalSampling(&messages.SamplingParams{MaxTokens: 5, PresencePenalty: 0.5})
	if temp != nil || topP != nil || seed != nil {
		t.Fatalf("unset parameters given: %v %v %v", temp, topP, seed)
	}
	temp, topP, seed = OptionalSampling(&messages.SamplingParams{Temperature: proto.Float64(0), TopP: proto.Float64(0.9), Seed: proto.Int64(-7)})
	if temp == nil || *temp != 0 || topP == nil || *topP != 0.9 || seed == nil || *seed != -7 {
		t.Fatalf("set parameters: %v %v %v", temp, topP, seed)
	}
	if temp, topP, seed := OptionalSampling(nil); temp != nil || topP != nil || seed != nil {
		t.Fatal("nil parameters")
	}
}
