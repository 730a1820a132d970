// Where slm_log lines go besides stderr (base.h "Internal to base"): status.c calls no other
// file of base, logfile.c and progress.c register their outputs. Checks the three outputs from
// what lands in files this test reads back: lines logged before slm_log_open_file are in the
// file, a non-zero rank queues its warnings for rank 0, and a log line erases a terminal
// progress bar first ("\r\033[K" right before the line).
#include <fcntl.h>
#include <unistd.h>

#include "base/base.h"
#include "test.h"

static char g_dir[] = "/tmp/slm_test_log_sinks.XXXXXX";

static char *slurp(const char *path) {
    char *text = NULL;
    size_t len = 0;
    return slm_file_read_all(path, &text, &len) == SLM_OK ? text : NULL;
}

// Runs first: nothing else has logged yet.
static void test_early_lines_reach_the_file(void) {
    slm_info("early line %d", 1);
    char *path = slm_path_join(g_dir, "rank.log");
    CHECK(slm_log_open_file(path) == SLM_OK);
    slm_info("late line %d", 2);
    slm_log_close_file();
    char *text = slurp(path);
    free(path);
    CHECK(text != NULL);
    char *early = strstr(text, " level=info early line 1\n");
    char *late = strstr(text, " level=info late line 2\n");
    CHECK_MSG(early && late && early < late, "log file:\n%s", text);
    free(text);
}

static void test_rank_queues_warnings(void) {
    slm_log_set_rank(1, 2);
    slm_warn("queued %s", "warning");
    slm_info("not queued");
    char buf[256];
    size_t n = slm_log_forward_take(buf, sizeof buf - 1);
    buf[n] = 0;
    slm_log_set_rank(0, 1);
    // one line: the level digit (SLM_LOG_WARN) and the message
    char want[64];
    snprintf(want, sizeof want, "%dqueued warning\n", (int)SLM_LOG_WARN);
    CHECK_EQ_STR(buf, want);
}

static void test_log_line_erases_the_bar(void) {
    char *path = slm_path_join(g_dir, "stderr.txt");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), saved = dup(2);
    CHECK(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    close(fd);
    slm_progress_enable(true);
    slm_progress p;
    slm_progress_begin(&p, "bar", 0, 10);
    p.tty = true; // stderr is a file here: draw as on a terminal
    slm_progress_update(&p, 5, "half");
    slm_warn("a log line");
    slm_progress_abandon(&p);
    slm_progress_enable(false);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char *text = slurp(path);
    free(path);
    CHECK(text != NULL);
    const char *bar = strstr(text, "bar [##########..........]  50.0% half ETA");
    const char *line = strstr(text, "\r\033[Kshardlm warning: a log line\n");
    CHECK_MSG(bar && line && bar < line, "stderr: \"%s\"", text);
    free(text);
}

int main(void) {
    setenv("SHARDLM_PROGRESS_AFTER", "0", 1); // draw at once
    if (!mkdtemp(g_dir)) return 1;
    RUN(test_early_lines_reach_the_file);
    RUN(test_rank_queues_warnings);
    RUN(test_log_line_erases_the_bar);
    char *p1 = slm_path_join(g_dir, "rank.log"), *p2 = slm_path_join(g_dir, "stderr.txt");
    unlink(p1);
    unlink(p2);
    free(p1);
    free(p2);
    rmdir(g_dir);
    return TEST_SUMMARY();
}
