/* Continuous-batching scheduler: N slots, each a sequence id of one
 * ig_context; one engine thread steps all running sequences together. It
 * admits, batches and streams; each sequence's logits row goes to its
 * ig_gen_seq (gen/seq.h), which samples and decides what text, logprobs and
 * finish reason come out.
 *
 * A job is one HTTP request; each of its n choices becomes a sequence that
 * waits in a bounded queue until a slot is free. The engine thread appends
 * generated text (and logprobs) to the job's per-choice output under the
 * job's mutex and signals its condition variable; the HTTP thread reads it
 * from there. Jobs are reference-counted (HTTP side + each sequence). */
#ifndef IG_SERVER_SCHED_H
#define IG_SERVER_SCHED_H

#include "gen/seq.h"
#include "gen/spec.h"
#include "ignis.h"
#include "server/metrics.h"
#include "server/request.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct srv_choice_out {
    srv_buf text;           /* text released to the client so far */
    ig_gen_logprob *lps;    /* one per generated token whose text is released (when logprobs) */
    size_t n_lps, cap_lps;
    int n_gen;              /* tokens generated */
    const char *finish;     /* "stop" / "length" / "tool_calls" once done, else NULL */
    bool done;
    /* with tools (srv_tools_active): the text is held here until the end,
     * then split into the content before the first call and the calls */
    srv_buf held;
    srv_tool_call *calls;
    int n_calls;
} srv_choice_out;

typedef struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;

    srv_request req;
    int32_t *prompt; /* token ids (owned) */
    int n_prompt;
    int max_tokens;  /* resolved (>= 1) */
    int n_choices;
    srv_choice_out *out;
    int n_done;
    int n_cached;    /* prompt tokens reused from a slot (first choice) */
    bool cancel;     /* set by the HTTP side: stop generating */
    bool failed;     /* the engine failed this job */
    char fail_msg[256];
    int fail_status; /* the HTTP status of the failure: 503 when the device was lost or out
                        of memory (the server is not at fault for the request), else 500 */
    double t_submit;
} srv_job;

/* Creates a job that takes ownership of *req (left empty) and prompt. */
srv_job *srv_job_create(srv_request *req, int32_t *prompt, int n_prompt, int max_tokens);
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);
/* Asks the engine to stop the job's sequences (client went away). */
void srv_job_cancel(srv_job *j);

typedef struct srv_sched srv_sched;

typedef struct srv_sched_params {
    int n_parallel;  /* slots; the context must have n_seq >= this */
    int n_batch;     /* tokens per ig_decode */
    int max_queue;   /* sequences allowed to wait beyond free slots */
    int32_t stop_ids[4]; /* end-of-generation ids (-1 unused) */
    ig_spec *spec;       /* speculative decoding (gen/spec.h) for n_parallel sequences; NULL: off */
    int n_image;     /* tokens of one image (0: no images): a step may exceed n_batch by less than this to
                        take an image whole; the context's n_batch must be n_batch + n_image */
    /* testing: before engine step fault_step (1-based; 0: never) the next
       device submission is made to fail (ig_device_test_fault) */
    int fault_step, fault_kind;
} srv_sched_params;

/* Creates the scheduler and starts its engine thread. */
ig_status srv_sched_start(ig_model *model, ig_context *ctx, const srv_sched_params *p,
                          srv_metrics *metrics, srv_sched **out);
/* Queues a job's sequences. Returns 0, or -1 when the queue is full, or -2
 * when the scheduler is shutting down. */
int srv_sched_submit(srv_sched *s, srv_job *j);
/* Stops admitting (srv_sched_submit answers -2 from then on); waits until
 * nothing runs, grace_s passes or *abort becomes nonzero (abort may be
 * NULL); then cancels the rest and joins the engine thread. The scheduler
 * stays allocated: srv_sched_submit and srv_sched_load remain safe to call
 * from other threads until srv_sched_free. Idempotent. */
void srv_sched_stop(srv_sched *s, double grace_s, const atomic_int *abort);
/* Frees a scheduler (stopping it first when needed). No other thread may
 * use it any more. */
void srv_sched_free(srv_sched *s);
/* srv_sched_stop + srv_sched_free. */
void srv_sched_shutdown(srv_sched *s, double grace_s, const atomic_int *abort);
/* Sequences running / waiting. */
void srv_sched_load(srv_sched *s, int *running, int *waiting);

#endif
