# titankit on a CUDA PyTorch image. torch comes from the base image and is never re-resolved:
# the project is installed with --no-deps and its few pure-Python needs are installed by name.
# Any CUDA PyTorch >= 2.11 devel image works (devel: nvcc for the ThunderKittens JIT build).
ARG BASE_IMAGE=pytorch/pytorch:2.11.0-cuda13.0-cudnn9-devel
FROM ${BASE_IMAGE}
WORKDIR /workspace/titankit
RUN pip install --no-cache-dir numpy tokenizers safetensors wandb tensorboard nvidia-ml-py pyarrow pytest hypothesis
COPY . .
RUN pip install --no-cache-dir --no-deps -e .
ENV NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
CMD ["./scripts/train.sh"]
