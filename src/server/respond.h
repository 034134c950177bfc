/* OpenAI response bodies and SSE chunks built from a job's output. */
#ifndef IG_SERVER_RESPOND_H
#define IG_SERVER_RESPOND_H

#include "server/sched.h"
#include "server/text.h"

typedef struct srv_resp_info {
    srv_kind kind;
    const char *id;       /* "chatcmpl-..." / "cmpl-..." */
    long long created;    /* unix seconds */
    const char *model;    /* model id echoed back */
    const ig_tokenizer *tok; /* for logprob token text (may be NULL) */
} srv_resp_info;

/* Complete non-streamed answer (chat.completion / text_completion) of a
 * finished job; the caller holds j->mu. malloc'ed JSON, NULL on OOM. */
char *srv_render_final(const srv_resp_info *ri, const srv_job *j);

/* Appends one SSE event "data: {chunk}\n\n" for choice `index`: the role
 * (chat, first chunk), text, logprobs of tokens lps[0..n_lps), and/or the
 * finish reason (NULL: still running). usage_null adds "usage":null. */
bool srv_render_chunk(srv_buf *out, const srv_resp_info *ri, int index, bool role,
                      const char *text, size_t n_text, const ig_gen_logprob *lps, size_t n_lps,
                      size_t text_offset, const char *finish, bool usage_null);
/* Appends the delta.tool_calls chunks of a finished choice (nothing when it
 * has no calls). */
bool srv_render_tool_call_chunks(srv_buf *out, const srv_resp_info *ri, int index,
                                 const srv_choice_out *o, bool usage_null);
/* Appends the usage chunk (choices: []) of a job; caller holds j->mu. */
bool srv_render_usage_chunk(srv_buf *out, const srv_resp_info *ri, const srv_job *j);
/* Appends an SSE error event {"error":{...}}. */
bool srv_render_error_event(srv_buf *out, const char *message, const char *type);

/* A JSON string value from possibly ill-formed UTF-8 (U+FFFD replaces bad
 * bytes); never NULL unless out of memory. */
struct json_t;
struct json_t *srv_json_text(const char *s, size_t n);

#endif
