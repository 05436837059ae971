module github.com/babelqueue-go/babelqueue

go 1.24.0
