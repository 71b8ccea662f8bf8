/* Load one GGUF model with llama.cpp's loader, as an engine would (CPU only, memory-mapped: LLAMA_LOAD_MODE_MMAP, this version's use_mmap), and say whether it loaded.
 *
 *     ggaudit-load MODEL [--decode]
 *
 * Prints "stage: load", then "loaded" or "refused: <the loader's reason>"; with --decode it then creates a
 * context and decodes one token ("stage: decode", then "decoded" or "decode failed: <reason>").
 * Exit status: 0 loaded (and decoded), 1 refused by the loader, 2 loaded but the first decode failed,
 * 64 usage. A GGML_ASSERT aborts the process: the abort callback prints "aborted: <message>" and exits with the
 * status of the stage it aborted in, so an assertion in load_hparams is a refusal like a thrown exception.
 * The loader's own reason comes through its log callback: the lines that say error/failed/exception/invalid are
 * printed as "log: <line>" (the rest of its chatter is dropped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ggml.h"
#include "llama.h"

enum { LOADED = 0, REFUSED = 1, DECODE_FAILED = 2, USAGE = 64 };

/* The exit status an abort in the current stage means. */
static int abort_status = REFUSED;

static int is_reason(const char *line) {
    static const char *const words[] = {"error", "failed", "exception", "invalid", "missing", "wrong", "expected"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (strstr(line, words[i]) != NULL) {
            return 1;
        }
    }
    return 0;
}

static void on_log(enum ggml_log_level level, const char *text, void *user_data) {
    (void)user_data;
    if (level == GGML_LOG_LEVEL_ERROR || (level != GGML_LOG_LEVEL_DEBUG && is_reason(text))) {
        printf("log: %s", text);
        if (text[0] != '\0' && text[strlen(text) - 1] != '\n') {
            putchar('\n');
        }
        fflush(stdout);
    }
}

static void on_abort(const char *message) {
    printf("aborted: %s\n", message);
    fflush(stdout);
    _exit(abort_status);
}

static void stage(const char *name, int status) {
    abort_status = status;
    printf("stage: %s\n", name);
    fflush(stdout);
}

/* One token through a one-token context: the graph's shapes and assertions meet the hyperparameters here. */
static int decode_one(struct llama_model *model) {
    struct llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = 16;
    cparams.n_batch = 16;
    cparams.n_ubatch = 16;
    cparams.n_threads = 1;
    cparams.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(model, cparams);
    if (ctx == NULL) {
        printf("decode failed: no context\n");
        return DECODE_FAILED;
    }
    llama_token token = 0;
    int rc = llama_decode(ctx, llama_batch_get_one(&token, 1));
    llama_free(ctx);
    if (rc != 0) {
        printf("decode failed: llama_decode returned %d\n", rc);
        return DECODE_FAILED;
    }
    printf("decoded\n");
    return LOADED;
}

int main(int argc, char **argv) {
    if (argc < 2 || (argc == 3 && strcmp(argv[2], "--decode") != 0) || argc > 3) {
        fprintf(stderr, "usage: %s MODEL [--decode]\n", argv[0]);
        return USAGE;
    }
    ggml_set_abort_callback(on_abort);
    llama_log_set(on_log, NULL);
    llama_backend_init();

    struct llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = 0;
    mparams.load_mode = LLAMA_LOAD_MODE_MMAP;
    stage("load", REFUSED);
    struct llama_model *model = llama_model_load_from_file(argv[1], mparams);
    if (model == NULL) {
        printf("refused: llama_model_load_from_file returned NULL\n");
        return REFUSED;
    }
    printf("loaded\n");
    fflush(stdout);
    int status = LOADED;
    if (argc == 3) {
        stage("decode", DECODE_FAILED);
        status = decode_one(model);
    }
    llama_model_free(model);
    llama_backend_free();
    return status;
}
