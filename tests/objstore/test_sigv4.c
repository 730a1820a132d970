// SigV4 signer against AWS's published examples, the INI (credentials / config) parser, the
// ListObjectsV2 XML reader and s3:// URI parsing.
//
// Expected values are AWS's, not ours:
//  - S3 API Reference, "Authenticating Requests: Using the Authorization Header (AWS Signature
//    Version 4)", section "Examples: Signature Calculations"
//    (https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html): GET Object
//    with a Range header, PUT Object, GET Bucket Lifecycle (a value-less "?lifecycle"), GET Bucket
//    (List Objects, "?max-keys=2&prefix=J"); canonical request hashes, signatures.
//  - AWS General Reference, "Examples of how to derive a signing key / signature version 4
//    test suite" (https://docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html):
//    get-vanilla.
#include "objstore/objstore.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static const char *AKID = "AKIAIOSFODNN7EXAMPLE";
static const char *SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
static const char *EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

static void test_sha256(void) {
    char h[65];
    slm_sha256_hex("", 0, h);
    CHECK_EQ_STR(h, EMPTY);
    // AWS's PUT Object example payload.
    slm_sha256_hex("Welcome to Amazon S3.", 21, h);
    CHECK_EQ_STR(h, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
}

static void crhash(const slm_sigv4_out *o, char out[65]) {
    slm_sha256_hex(o->canonical_request.data, o->canonical_request.len, out);
}

static void test_get_object(void) {
    const char *h[] = {"Host",
                       "examplebucket.s3.amazonaws.com",
                       "Range",
                       "bytes=0-9",
                       "x-amz-content-sha256",
                       EMPTY,
                       "x-amz-date",
                       "20130524T000000Z"};
    slm_sigv4_req r = {.method = "GET",
                       .canonical_uri = "/test.txt",
                       .headers = h,
                       .n_headers = 4,
                       .payload_sha256 = EMPTY,
                       .amz_date = "20130524T000000Z",
                       .region = "us-east-1",
                       .service = "s3",
                       .access_key = AKID,
                       .secret_key = SECRET};
    slm_sigv4_out o;
    CHECK_OK(slm_sigv4_sign(&r, &o));
    CHECK_EQ_STR(o.canonical_request.data,
                 "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
                 "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b78"
                 "52b855\nx-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-"
                 "date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    char ch[65];
    crhash(&o, ch);
    CHECK_EQ_STR(ch, "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    CHECK_EQ_STR(o.string_to_sign.data,
                 "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                 "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    CHECK_EQ_STR(o.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    CHECK_EQ_STR(o.authorization.data,
                 "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                 "aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature="
                 "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    slm_sigv4_out_free(&o);
}

static void test_put_object(void) {
    const char *payload = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
    // The key is "test$file.text": '$' encoded once in the canonical URI.
    slm_buf uri = {0};
    slm_buf_append(&uri, "/", 1);
    slm_sigv4_uri_encode(&uri, "test$file.text", 14, true);
    CHECK_EQ_STR(uri.data, "/test%24file.text");
    const char *h[] = {"Host",
                       "examplebucket.s3.amazonaws.com",
                       "Date",
                       "Fri, 24 May 2013 00:00:00 GMT",
                       "x-amz-date",
                       "20130524T000000Z",
                       "x-amz-storage-class",
                       "REDUCED_REDUNDANCY",
                       "x-amz-content-sha256",
                       payload};
    slm_sigv4_req r = {.method = "PUT",
                       .canonical_uri = uri.data,
                       .headers = h,
                       .n_headers = 5,
                       .payload_sha256 = payload,
                       .amz_date = "20130524T000000Z",
                       .region = "us-east-1",
                       .service = "s3",
                       .access_key = AKID,
                       .secret_key = SECRET};
    slm_sigv4_out o;
    slm_status st = slm_sigv4_sign(&r, &o);
    slm_buf_free(&uri);
    CHECK_OK(st);
    char ch[65];
    crhash(&o, ch);
    CHECK_EQ_STR(ch, "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
    CHECK_EQ_STR(o.signed_headers.data,
                 "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
    CHECK_EQ_STR(o.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
    slm_sigv4_out_free(&o);
}

static void test_lifecycle_valueless_query(void) {
    const char *q[] = {"lifecycle", ""};
    const char *h[] = {"Host",
                       "examplebucket.s3.amazonaws.com",
                       "x-amz-date",
                       "20130524T000000Z",
                       "x-amz-content-sha256",
                       EMPTY};
    slm_sigv4_req r = {.method = "GET",
                       .canonical_uri = "/",
                       .query = q,
                       .n_query = 1,
                       .headers = h,
                       .n_headers = 3,
                       .payload_sha256 = EMPTY,
                       .amz_date = "20130524T000000Z",
                       .region = "us-east-1",
                       .service = "s3",
                       .access_key = AKID,
                       .secret_key = SECRET};
    slm_sigv4_out o;
    CHECK_OK(slm_sigv4_sign(&r, &o));
    CHECK_EQ_STR(o.canonical_query.data, "lifecycle=");
    char ch[65];
    crhash(&o, ch);
    CHECK_EQ_STR(ch, "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
    CHECK_EQ_STR(o.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
    slm_sigv4_out_free(&o);
}

static void test_list_objects_sorted_query(void) {
    // Given unsorted: the signer sorts by name.
    const char *q[] = {"prefix", "J", "max-keys", "2"};
    const char *h[] = {"x-amz-date",
                       "20130524T000000Z",
                       "Host",
                       "examplebucket.s3.amazonaws.com",
                       "x-amz-content-sha256",
                       EMPTY};
    slm_sigv4_req r = {.method = "GET",
                       .canonical_uri = "/",
                       .query = q,
                       .n_query = 2,
                       .headers = h,
                       .n_headers = 3,
                       .payload_sha256 = EMPTY,
                       .amz_date = "20130524T000000Z",
                       .region = "us-east-1",
                       .service = "s3",
                       .access_key = AKID,
                       .secret_key = SECRET};
    slm_sigv4_out o;
    CHECK_OK(slm_sigv4_sign(&r, &o));
    CHECK_EQ_STR(o.canonical_query.data, "max-keys=2&prefix=J");
    char ch[65];
    crhash(&o, ch);
    CHECK_EQ_STR(ch, "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
    CHECK_EQ_STR(o.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
    slm_sigv4_out_free(&o);
}

static void test_suite_get_vanilla(void) {
    const char *h[] = {"Host", "example.amazonaws.com", "X-Amz-Date", "20150830T123600Z"};
    slm_sigv4_req r = {.method = "GET",
                       .canonical_uri = "/",
                       .headers = h,
                       .n_headers = 2,
                       .payload_sha256 = EMPTY,
                       .amz_date = "20150830T123600Z",
                       .region = "us-east-1",
                       .service = "service",
                       .access_key = "AKIDEXAMPLE",
                       .secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};
    slm_sigv4_out o;
    CHECK_OK(slm_sigv4_sign(&r, &o));
    CHECK_EQ_STR(o.canonical_request.data,
                 "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-"
                 "date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK_EQ_STR(o.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
    slm_sigv4_out_free(&o);
}

static void test_encode(void) {
    slm_buf b = {0};
    slm_sigv4_uri_encode(&b, "a b/c~d_e.f-g+h=i&j", 19, false);
    CHECK_EQ_STR(b.data, "a%20b%2Fc~d_e.f-g%2Bh%3Di%26j");
    b.len = 0;
    slm_sigv4_uri_encode(&b, "dir/\xc3\xa9", 6, true);
    CHECK_EQ_STR(b.data, "dir/%C3%A9");
    slm_buf_free(&b);
}

static void test_ini(void) {
    const char *cred = "# comment\n[default]\naws_access_key_id = AKD\naws_secret_access_key=SKD\n"
                       "\n[work]\r\naws_access_key_id = AKW \r\naws_secret_access_key = S/W+1\r\n"
                       "aws_session_token = TOK==\r\n";
    slm_aws_profile p = {0};
    CHECK_OK(slm_aws_ini_parse(cred, strlen(cred), "work", false, "cred", &p));
    CHECK_EQ_STR(p.access_key, "AKW");
    CHECK_EQ_STR(p.secret_key, "S/W+1");
    CHECK_EQ_STR(p.session_token, "TOK==");
    slm_aws_profile_free(&p);
    const char *conf = "[default]\nregion = eu-west-1\n[profile work]\nregion = us-west-2\n"
                       "s3 =\n  addressing_style = path\n  endpoint_url = http://h:1\n"
                       "output = json\n";
    CHECK_OK(slm_aws_ini_parse(conf, strlen(conf), "work", true, "conf", &p));
    CHECK_EQ_STR(p.region, "us-west-2");
    CHECK_EQ_STR(p.addressing_style, "path");
    CHECK_EQ_STR(p.endpoint_url, "http://h:1");
    CHECK(p.access_key == NULL);
    slm_aws_profile_free(&p);
    const char *bad = "[default]\nthis line has no equals\n";
    CHECK(slm_aws_ini_parse(bad, strlen(bad), "default", false, "bad.ini", &p) == SLM_E_FORMAT);
    CHECK(strstr(slm_errmsg(), "bad.ini:2") != NULL);
    slm_aws_profile_free(&p);
}

static void test_uri(void) {
    char *b, *p;
    CHECK_OK(slm_s3_uri_parse("s3://my-bucket/run/a/", &b, &p));
    CHECK_EQ_STR(b, "my-bucket");
    CHECK_EQ_STR(p, "run/a/");
    free(b);
    free(p);
    CHECK_OK(slm_s3_uri_parse("s3://bkt", &b, &p));
    CHECK_EQ_STR(p, "");
    free(b);
    free(p);
    CHECK(slm_s3_uri_parse("s3://Bad_Bucket/x", &b, &p) == SLM_E_ARG);
    CHECK(slm_s3_uri_parse("/local/path", &b, &p) == SLM_E_ARG);
}

static void test_xml(void) {
    const char *page = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult "
                       "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
                       "<Prefix>p/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
                       "<NextContinuationToken>tok&amp;1</NextContinuationToken><Contents><Key>p/a"
                       "&amp;b</Key><Size>12</Size><ETag>&quot;abc&quot;</ETag></Contents>"
                       "<Contents><Key>p/c</Key><Size>0</Size></Contents></ListBucketResult>";
    slm_s3_list l = {0};
    bool trunc;
    char *tok;
    CHECK_OK(slm_s3_xml_list(page, strlen(page), &l, &trunc, &tok));
    CHECK(trunc);
    CHECK_EQ_STR(tok, "tok&1");
    free(tok);
    CHECK_EQ_INT(l.n, 2);
    CHECK_EQ_STR(l.obj[0].key, "p/a&b");
    CHECK_EQ_INT(l.obj[0].size, 12);
    CHECK_EQ_STR(l.obj[0].etag, "abc");
    CHECK_EQ_INT(l.obj[1].size, 0);
    slm_s3_list_free(&l);
    const char *err = "<Error><Code>SignatureDoesNotMatch</Code><Message>no</Message></Error>";
    char *code;
    CHECK_OK(slm_s3_xml_text(err, strlen(err), "Code", &code));
    CHECK_EQ_STR(code, "SignatureDoesNotMatch");
    free(code);
    CHECK(slm_s3_xml_list("<nope", 5, &l, &trunc, &tok) == SLM_E_FORMAT);
    const char *badsize = "<ListBucketResult><Contents><Key>k</Key><Size>-3</Size></Contents>"
                          "</ListBucketResult>";
    CHECK(slm_s3_xml_list(badsize, strlen(badsize), &l, &trunc, &tok) == SLM_E_FORMAT);
}

int main(void) {
    RUN(test_sha256);
    RUN(test_get_object);
    RUN(test_put_object);
    RUN(test_lifecycle_valueless_query);
    RUN(test_list_objects_sorted_query);
    RUN(test_suite_get_vanilla);
    RUN(test_encode);
    RUN(test_ini);
    RUN(test_uri);
    RUN(test_xml);
    return TEST_SUMMARY();
}
