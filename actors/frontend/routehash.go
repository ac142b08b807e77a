package frontend

import (
	"sync/atomic"

	"github.com/turbine-llm/turbine/kv"
	"github.com/turbine-llm/turbine/messages"
	"google.golang.org/protobuf/proto"
)

// hashPrompt replaces the prompt of rr, its token ids, with what the Router grain routes
// on: the prompt's chained block hashes at blockSize under the request's adapter and
// cache salt (kv.AppendSaltedSequenceHashes, docs/reference.md §2) and its length in
// tokens. The grain, one activation per model, then spends no time hashing, and a
// 4,096-token prompt travels as 256 hashes at block size 16 (64 at 64) instead of 4,096
// token ids. It returns the token ids taken out (restore them with rr.TokenIds = tokens)
// and true, or false when rr is left as it was: no block size known (0), no token ids,
// or hashes already there.
func hashPrompt(rr *messages.RouteRequest, blockSize int) (tokens []uint32, ok bool) {
	if blockSize <= 0 || len(rr.TokenIds) == 0 || len(rr.BlockHashes) > 0 {
		return nil, false
	}
	tokens = rr.TokenIds
	rr.BlockHashes = kv.AppendSaltedSequenceHashes(make([]uint64, 0, len(tokens)/blockSize),
		tokens, blockSize, rr.GetLoraName(), rr.GetCacheSalt())
	rr.PromptTokens = proto.Int32(int32(len(tokens)))
	rr.TokenIds = nil
	return tokens, true
}

// hashesRefused is set once a Router grain refused a prompt's block hashes, so that the
// warning is logged once per process.
var hashesRefused atomic.Bool
