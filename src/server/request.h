/* Request parsing and validation for the OpenAI-compatible endpoints: JSON
 * body -> srv_request, or an srv_error in OpenAI's shape. Pure functions
 * (no engine, no HTTP), unit-tested under sanitizers. */
#ifndef IG_SERVER_REQUEST_H
#define IG_SERVER_REQUEST_H

#include "grammar/grammar.h"
#include "ignis.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum srv_kind {
    SRV_CHAT = 0,       /* POST /v1/chat/completions */
    SRV_COMPLETION = 1, /* POST /v1/completions */
} srv_kind;

/* An error answer: HTTP status plus the fields of
 * {"error":{"message","type","param","code"}}. type/param/code are static
 * strings or NULL (JSON null). */
typedef struct srv_error {
    int status;
    char message[512];
    const char *type;
    const char *param;
    const char *code;
} srv_error;

void srv_error_set(srv_error *e, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Shorthand for 400 invalid_request_error. */
void srv_error_bad(srv_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* {"error":{...}} as a malloc'ed NUL-terminated string (NULL when out of
 * memory). */
char *srv_error_json(const srv_error *e);

typedef struct srv_image {
    uint8_t *data; /* the encoded file (PNG or JPEG) */
    size_t len;
} srv_image;

/* Most images per request, and most bytes of one decoded data: URL. */
#define SRV_MAX_IMAGES 16
#define SRV_MAX_IMAGE_BYTES ((size_t)20 << 20)

typedef struct srv_message {
    char *role; /* "system", "user" or "assistant" (normalized) */
    char *content; /* tool calls and tool results already rendered in (docs/server.md) */
} srv_message;

/* A function the model may call (tools[i].function). */
typedef struct srv_tool {
    char *name;
    char *description; /* NULL when absent */
    char *parameters;  /* JSON Schema text, NULL when absent (any object) */
} srv_tool;

typedef enum srv_tool_choice {
    SRV_TOOLS_AUTO = 0, /* the model decides; calls are detected in its text */
    SRV_TOOLS_NONE,     /* no tools offered */
    SRV_TOOLS_REQUIRED, /* the output is one or more calls, constrained */
    SRV_TOOLS_NAMED,    /* the output is a call of tools[tool_named], constrained */
} srv_tool_choice;

/* Limits the parser enforces (0 = unchecked where noted). */
typedef struct srv_limits {
    int n_vocab;       /* token ids must be < n_vocab (0: unchecked) */
    int max_n;         /* most choices per request */
    int max_stop;      /* most stop strings */
    int max_stop_len;  /* longest stop string in bytes */
    int max_bias;      /* most logit_bias entries */
    int max_messages;  /* most chat messages */
} srv_limits;

srv_limits srv_default_limits(void);

typedef struct srv_request {
    srv_kind kind;
    char *model; /* NULL when absent */
    /* chat */
    srv_message *messages;
    size_t n_messages;
    /* completion: text prompt, or token ids when prompt_ids != NULL */
    char *prompt;
    size_t prompt_len;
    int32_t *prompt_ids;
    size_t n_prompt_ids;

    int max_tokens; /* -1: not given (up to the context) */
    double temperature;
    double top_p;
    int top_k; /* <= 0: off */
    double min_p;
    bool has_seed;
    uint64_t seed;
    char **stop;
    size_t n_stop;
    int n;
    double presence_penalty;
    double frequency_penalty;
    ig_logit_bias *logit_bias;
    size_t n_logit_bias;
    bool logprobs;
    int top_logprobs;
    bool stream;
    bool include_usage;
    /* Constrained output: response_format json_object / json_schema, or the
     * "grammar" extension (GBNF). A reference (srv_request_free drops it);
     * NULL: free text. */
    ig_grammar *grammar;
    /* tools (chat only): n_tools == 0 when none were given */
    srv_tool *tools;
    size_t n_tools;
    srv_tool_choice tool_choice;
    int tool_named;
    bool parallel_tool_calls;
    bool no_speculative; /* extension "speculative": false turns the server's drafter off */
    /* images of user messages (image_url content parts, data: URLs), in
     * order; each left a <start_of_image> in its message's text */
    srv_image *images;
    size_t n_images;
    float **image_embd; /* [n_images], filled by the server before the job runs */
} srv_request;

/* True when the output is to be read for tool calls. */
static inline bool srv_tools_active(const srv_request *r) {
    return r->n_tools > 0 && r->tool_choice != SRV_TOOLS_NONE;
}

/* A tool call found in generated text. */
typedef struct srv_tool_call {
    char id[40];
    char *name;
    char *arguments; /* compact JSON text */
} srv_tool_call;

/* Finds the ```tool_call blocks of text (docs/server.md) that name one of
 * r's tools and carry a JSON object of arguments. Returns the number found
 * (*calls malloc'ed, free with srv_tool_calls_free), 0 when none, -1 when
 * out of memory; *content_len gets the length of the text before the first
 * call (trailing white space dropped). */
int srv_parse_tool_calls(const srv_request *r, const char *text, size_t len,
                         srv_tool_call **calls, size_t *content_len);
void srv_tool_calls_free(srv_tool_call *calls, int n);

/* Parses a request body. Returns true and fills *out (release with
 * srv_request_free) or returns false with *err filled (out is then empty). */
bool srv_parse_request(srv_kind kind, const char *body, size_t len, const srv_limits *lim,
                       srv_request *out, srv_error *err);
void srv_request_free(srv_request *r);

/* POST /tokenize: {"content"|"prompt": string, "add_special": bool,
 * "parse_special": bool}. */
typedef struct srv_tokenize_req {
    char *text;
    size_t len;
    bool add_special;
    bool parse_special;
    bool with_pieces;
} srv_tokenize_req;
bool srv_parse_tokenize(const char *body, size_t len, srv_tokenize_req *out, srv_error *err);
void srv_tokenize_req_free(srv_tokenize_req *r);

/* POST /detokenize: {"tokens": [int, ...]} with ids in [0, n_vocab). */
bool srv_parse_detokenize(const char *body, size_t len, int n_vocab, int32_t **ids, size_t *n_ids,
                          srv_error *err);

#endif
