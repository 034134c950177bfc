/* The server's request bodies (src/server/request.c), no HTTP: the first
 * byte picks the route (chat completions, completions, /tokenize,
 * /detokenize), the rest is the body. A chat request with tools also has
 * its own body read back as model output for tool calls. */
#include "fuzz_common.h"

#include "server/request.h"

#define N_VOCAB 262144

static void parse_generation(srv_kind kind, const char *body, size_t len) {
    srv_limits lim = srv_default_limits();
    lim.n_vocab = N_VOCAB;
    srv_request r;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (!srv_parse_request(kind, body, len, &lim, &r, &e)) {
        if (e.status < 400 || e.status > 599 || !e.message[0]) abort();
        char *json = srv_error_json(&e);
        free(json);
        return;
    }
    if (r.n_tools > 0) {
        srv_tool_call *calls = NULL;
        size_t content_len = 0;
        int n = srv_parse_tool_calls(&r, body, len, &calls, &content_len);
        if (n > 0) srv_tool_calls_free(calls, n);
        if (content_len > len) abort();
    }
    srv_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    srv_error e;
    memset(&e, 0, sizeof e);
    switch (data[0] & 3) {
    case 0:
        parse_generation(SRV_CHAT, body, len);
        break;
    case 1:
        parse_generation(SRV_COMPLETION, body, len);
        break;
    case 2: {
        srv_tokenize_req t;
        if (srv_parse_tokenize(body, len, &t, &e)) srv_tokenize_req_free(&t);
        break;
    }
    default: {
        int32_t *ids = NULL;
        size_t n = 0;
        if (srv_parse_detokenize(body, len, N_VOCAB, &ids, &n, &e)) {
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= N_VOCAB) abort();
            free(ids);
        }
        break;
    }
    }
    return 0;
}
