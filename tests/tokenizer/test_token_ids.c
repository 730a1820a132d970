// slm_token_ids_parse_line, the one parser of "lines of token ids" (eval --token-ids and
// tokenizer decode): ids, whitespace, the column of a bad character, the vocabulary bound.
#include "tokenizer/tokenizer.h"
#include "test.h"

#include <string.h>

static void test_parse(void) {
    slm_ivec ids = {0};
    CHECK_OK(slm_token_ids_parse_line("f:1", " 3\t17  0\r\n99", 100, "the vocab", &ids));
    CHECK_EQ_INT(ids.len, 3); // stops at the newline
    CHECK(ids.data[0] == 3 && ids.data[1] == 17 && ids.data[2] == 0);
    CHECK_OK(slm_token_ids_parse_line("f:2", "   ", 100, "the vocab", &ids));
    CHECK_EQ_INT(ids.len, 0);
    CHECK_EQ_INT(slm_token_ids_parse_line("f:3", "1 2 x", 100, "the vocab", &ids), SLM_E_FORMAT);
    CHECK_EQ_STR(slm_errmsg(), "f:3:5: expected a token id, found 'x'");
    CHECK_EQ_INT(slm_token_ids_parse_line("f:4", "-1", 100, "the vocab", &ids), SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "f:4:1:") != NULL);
    CHECK_EQ_INT(slm_token_ids_parse_line("f:5", "5 100", 100, "the vocab", &ids), SLM_E_ARG);
    CHECK_EQ_STR(slm_errmsg(), "f:5:3: token id 100 is outside the vocab [0, 100)");
    CHECK_EQ_INT(slm_token_ids_parse_line("f:6", "99999999999999999999", 100, "v", &ids),
                 SLM_E_ARG); // overflow is out of range, not wrapped
    CHECK_OK(slm_token_ids_parse_line("f:7", "99", 100, "v", &ids));
    CHECK(ids.len == 1 && ids.data[0] == 99);
    slm_ivec_free(&ids);
}

int main(void) {
    RUN(test_parse);
    return TEST_SUMMARY();
}
