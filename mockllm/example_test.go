package mockllm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/llmgovernor/governor/mockllm"
)

// A provider on a free port of 127.0.0.1 that rejects the first two
// attempts of request item-7.
func ExampleStart() {
	s, baseURL, stop, err := mockllm.Start(mockllm.Config{})
	if err != nil {
		panic(err)
	}
	defer stop()

	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, baseURL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Request-Id", "item-7")
		req.Header.Set("X-Mock-Fault", "429,529")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fmt.Println(resp.StatusCode)
			continue
		}
		var answer struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		_ = json.Unmarshal(b, &answer)
		fmt.Println(resp.StatusCode, answer.Choices[0].Message.Content)
	}
	fmt.Println(s.Stats().ByRequestID["item-7"], "attempts")
	// Output:
	// 429
	// 529
	// 200 Simulated answer to: Say hello
	// 3 attempts
}
