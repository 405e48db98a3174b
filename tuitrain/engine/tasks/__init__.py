"""What is trained: the `Task` contract and its checks (base), the built-in tasks
(classify, charlm) and `build_task`, which picks one by `task.name` or loads a user's
factory (build). Tasks may import data and models; neither imports a task."""
