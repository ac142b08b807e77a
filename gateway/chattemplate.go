package gateway

import "github.com/turbine-llm/turbine/model"

// requestTemplate decides on the chat template req brings itself (docs/reference.md
// §20): its chat_template, or chat_template_kwargs.chat_template, which vLLM renders
// too. A server that does not trust requests' templates (Config.TrustRequestChatTemplate
// false, the default) refuses either with vLLM's 400 (KindUnsupported, param naming the
// field) before compiling anything: the template engine bounds neither a template's
// running time nor its output. A trusted chat_template is compiled into req.ChatTemplate;
// one that does not parse is a 400 (KindInvalidValue). A trusted
// chat_template_kwargs.chat_template is a template variable like any other kwarg.
func (s *Server) requestTemplate(req *chatRequest) *APIError {
	param := ""
	switch {
	case req.ChatTemplateSource != nil:
		param = "chat_template"
	case req.TemplateKwargs["chat_template"] != nil: // null is no template, as in vLLM
		param = "chat_template_kwargs.chat_template"
	default:
		return nil
	}
	if !s.cfg.TrustRequestChatTemplate {
		return newError(KindUnsupported, param, "Chat template is passed with request, but --trust-request-chat-template is not set. "+
			"Refused request with untrusted chat template.")
	}
	if req.ChatTemplateSource == nil || req.ChatTemplate != nil {
		return nil
	}
	t, err := model.ParseChatTemplate(*req.ChatTemplateSource)
	if err != nil {
		return newError(KindInvalidValue, "chat_template", "Invalid 'chat_template': the template could not be parsed: %v", err)
	}
	req.ChatTemplate = t
	return nil
}
