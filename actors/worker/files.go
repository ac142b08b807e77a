package worker

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// modelFiles answers a ModelFilesRequest off the actor's goroutine: the files may be
// tens of MB, read from disk and hashed for each request. The answer goes straight to
// the sender (a future), as Respond would send it.
func (w *workerActor) modelFiles(c actor.Context, m *messages.ModelFilesRequest) {
	sender := c.Sender()
	if sender == nil {
		w.log.Warn().Msg("ModelFilesRequest without a sender: dropped")
		return
	}
	sys, source, digest := c.ActorSystem(), w.cfg.Card.GetTokenizer(), m.GetDigest()
	go func() { sys.Root.Send(sender, answerModelFiles(source, digest, model.MaxTokenizerBytes)) }()
}

// answerModelFiles is the answer to a ModelFilesRequest for digest, for a worker whose card
// names tokenizer source: the folder's tokenizer files (model.ReadTokenizerFiles, at
// most maxBytes bytes in all) when they hash to digest now. Otherwise the answer has no
// files and its error says why: a builtin tokenizer (no files), an unreadable folder,
// files over maxBytes, or files whose digest is not the one asked for (changed on disk
// since the card was made, or another card).
func answerModelFiles(source, digest string, maxBytes int64) *messages.ModelFiles {
	if source == "" || model.IsBuiltin(source) {
		return &messages.ModelFiles{Error: fmt.Sprintf("worker: tokenizer %q has no files to send (builtin tokenizers are embedded in every turbine binary)", source)}
	}
	files, err := model.ReadTokenizerFiles(source, maxBytes)
	if err != nil {
		return &messages.ModelFiles{Error: "worker: " + err.Error()}
	}
	got := model.TokenizerDigest(files)
	if got != digest {
		return &messages.ModelFiles{Digest: got, Error: fmt.Sprintf("worker: tokenizer folder %q has digest %s, not the %q asked for (its files changed since the card was made?)", source, got, digest)}
	}
	out := &messages.ModelFiles{Digest: got, Files: make([]*messages.ModelFile, len(files))}
	for i, f := range files {
		out.Files[i] = &messages.ModelFile{Name: f.Name, Data: f.Data}
	}
	return out
}
