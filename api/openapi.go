package api

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// OpenAPIDocument is the hand-written OpenAPI 3.1 description of every route
// (openapi.json); a test checks it against the router.
//
//go:embed openapi.json
var OpenAPIDocument []byte

// serveOpenAPI handles GET /v1/openapi.json.
func serveOpenAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/json", OpenAPIDocument)
}
